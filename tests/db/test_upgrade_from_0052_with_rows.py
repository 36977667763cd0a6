"""Migrations 0056 (verification backoff) and 0057 (quarantine resolution, participant status) on a database at 0052
that holds rows in every table they alter: the rows stay, and the new columns start unknown."""
from __future__ import annotations

import psycopg

from indexer.db import migrate


def test_upgrade_from_0052_with_rows_present(empty_db_url):
    migrate.upgrade(empty_db_url, "0052_records_check")
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        sid = c.execute("INSERT INTO rec.source (uri, digest) VALUES ('file:///x.ndjson', 'ab') RETURNING source_id"
                        ).fetchone()[0]
        c.execute("INSERT INTO rec.quarantine (source_id, line, kind, reason, raw) VALUES (%s, 1, 'start', 'bad', "
                  "'{}')", (sid,))
        c.execute("INSERT INTO net.snapshot_failure (epoch_index, what, source, url, error, transient) "
                  "VALUES (1, 'participant', 'snapshot:1:participant:g1', 'u', 'e', true)")
        c.execute("INSERT INTO rec.epoch (epoch_index, source_id, source_line) VALUES (1, %s, 1)", (sid,))
        c.execute("INSERT INTO rec.participant_epoch (epoch_index, participant, source_id, source_line) "
                  "VALUES (1, 'g1', %s, 2)", (sid,))
        c.execute("INSERT INTO rec.escrow (escrow_id, epoch_index, model_id, slots, source_id, source_line) "
                  "VALUES ('7', 1, 'm', '{}', %s, 3)", (sid,))
        c.execute("INSERT INTO replay.escrow_verification (escrow_id, epoch_index, level, crashes) "
                  "VALUES ('7', 1, 'none', 3)")
    migrate.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT count(*) FROM rec.quarantine WHERE resolved_at IS NULL").fetchone()[0] == 1
        assert c.execute("SELECT status FROM rec.participant_epoch").fetchone() == (None,)
        assert c.execute("SELECT crashes, retry_after FROM api.escrow_verification").fetchone() == (3, None)

"""Migration 0061 (rec.quarantine.record_key) on a database holding open quarantine rows from before it: the rows
start with their key unread, and the first load after the upgrade reads it and resolves them by it."""
from __future__ import annotations

import json

import psycopg

from indexer.db import migrate
from tests.support.helpers import escrow, ingest, tx, write_lines


def test_rows_quarantined_before_the_key_column_resolve_after_the_upgrade(empty_db_url, tmp_path):
    migrate.upgrade(empty_db_url, "0057_quarantine_status")
    bad = {**tx("start", 100, 100, prompt_hash="zz", input_length=10, max_tokens=5)}
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        sid = c.execute("INSERT INTO rec.source (uri, digest) VALUES ('file:///old.ndjson', 'ab') "
                        "RETURNING source_id").fetchone()[0]
        c.execute("INSERT INTO rec.quarantine (source_id, line, kind, reason, raw, quarantined_at) "
                  "VALUES (%s, 2, 'start', 'field prompt_hash: not a hex string', %s, now() - interval '1 day'), "
                  "(%s, 3, 'start', 'bad', %s, now() - interval '1 day')",
                  (sid, json.dumps(bad), sid, json.dumps({**bad, "inference_id": 101})))
    migrate.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT count(*) FROM rec.quarantine WHERE record_key IS NULL").fetchone()[0] == 2
    good = {**bad, "prompt_hash": "ab" * 32}
    ingest(empty_db_url, write_lines(tmp_path / "new.ndjson", [escrow(), good]))
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT line, record_key, resolved_line FROM rec.quarantine ORDER BY line").fetchall() == [
            (2, ["1971", "100"], 2), (3, ["1971", "101"], None)]

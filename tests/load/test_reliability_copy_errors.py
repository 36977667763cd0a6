"""Issue 9 item 13: loading keys that exist already (a reload, amendments, a key twice in one batch) takes the upsert
path without provoking a unique violation first, so the server log gets no ERROR lines (with key values) for them."""
from __future__ import annotations

import psycopg
import pytest

from tests.support.helpers import escrow, ingest, tx, write_lines

DUPLICATE = "duplicate key value violates unique constraint"


def _server_log(admin_url: str) -> tuple[str, int] | None:
    """(path, size) of the embedded test cluster's log (INDEXER_HOME/postgres.log beside pgdata), if readable."""
    with psycopg.connect(admin_url, autocommit=True) as c:
        data = c.execute("SHOW data_directory").fetchone()[0]
        path = data.rsplit("/", 1)[0] + "/postgres.log"
        try:
            return path, c.execute("SELECT size FROM pg_stat_file(%s)", (path,)).fetchone()[0]
        except psycopg.Error:
            return None


def _log_since(admin_url: str, path: str, offset: int) -> str:
    with psycopg.connect(admin_url, autocommit=True) as c:
        size = c.execute("SELECT size FROM pg_stat_file(%s)", (path,)).fetchone()[0]
        return c.execute("SELECT pg_read_file(%s, %s, %s)", (path, offset, size - offset)).fetchone()[0]


def test_reloads_and_amendments_log_no_unique_violations(pg_admin_url, db_url, tmp_path, conn):
    log = _server_log(pg_admin_url)
    if log is None:
        pytest.skip("the server's log is not readable from here (not the embedded test cluster)")
    records = [escrow()] + [tx("start", i, i, prompt_hash="ab" * 32, input_length=10, max_tokens=5)
                            for i in range(1, 200)]
    path = write_lines(tmp_path / "a.ndjson", records)
    ingest(db_url, path)
    path, offset = log
    ingest(db_url, tmp_path / "a.ndjson")  # a reload: every key exists
    amended = write_lines(tmp_path / "b.ndjson", [tx("start", 5, 5, prompt_hash="cd" * 32, input_length=11,
                                                     max_tokens=5),
                                                  tx("start", 5, 5, prompt_hash="ef" * 32, input_length=12,
                                                     max_tokens=5)])  # an amendment, and its key twice
    summary = ingest(db_url, amended)
    assert summary.amended == 2
    assert conn.execute("SELECT prompt_hash FROM rec.start_tx WHERE inference_id = 5").fetchone() == ("ef" * 32,)
    assert DUPLICATE not in _log_since(pg_admin_url, path, offset)

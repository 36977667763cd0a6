"""Issue 9 item 5: a timestamp PostgreSQL would refuse (UTC offset beyond ±15:59:59, a unix second or ISO time
outside the years 1..9999) is quarantined naming the field; it used to abort the whole ingest at COPY time."""
from __future__ import annotations

import json

from tests.support.helpers import ingest_expecting_quarantine


def _epoch(index, observed_at) -> bytes:
    return json.dumps({"kind": "epoch", "epoch_index": index, "observed_at": observed_at}).encode()


LINES = [
    _epoch(408, "2025-01-02T03:04:05+16:00"),      # 1
    _epoch(409, "2025-01-02T03:04:05-23:59"),      # 2
    _epoch(410, -99_999_999_999),                  # 3
    _epoch(411, "0001-01-01T00:00:00+01:00"),      # 4
    _epoch(412, "2025-01-02T03:04:05+15:59"),      # 5 the widest offset PostgreSQL takes loads
]
WANT = {1: ("observed_at", "offset"), 2: ("observed_at", "offset"), 3: ("observed_at", "out of range"),
        4: ("observed_at", "out of range")}


def test_bad_timestamps_are_quarantined_and_the_rest_loads(db_url, tmp_path, conn):
    ingest_expecting_quarantine(db_url, tmp_path / "times.ndjson", conn, LINES, WANT)
    assert conn.execute("SELECT epoch_index, observed_at = '2025-01-02T03:04:05+15:59'::timestamptz "
                        "FROM rec.epoch").fetchall() == [(412, True)]

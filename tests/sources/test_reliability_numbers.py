"""Issue 9 item 4: numbers beyond JSON's double range and duplicate keys in one object are quarantined with a reason naming what is wrong; the rest of the file loads and the ingest succeeds."""
from __future__ import annotations

import json

import pytest

from indexer.sources.ndjson import Accepted, Rejected, classify_line
from tests.support.helpers import escrow, ingest_expecting_quarantine, tx


def _j(obj) -> bytes:
    return json.dumps(obj).encode()


START = tx("start", 100, 100, prompt_hash="ab" * 32, input_length=10, max_tokens=5)


@pytest.mark.parametrize("raw, reason", [
    (b'{"kind":"start","escrow_id":"1971","inference_id":1,"diff_nonce":1,"note":1e400}', "number 1e400 is out of range"),
    (b'{"kind":"start","escrow_id":"1971","inference_id":1,"diff_nonce":-1e400}', "number -1e400 is out of range"),
    (b'{"kind":"bogus","kind":"start","escrow_id":"1971","inference_id":1,"diff_nonce":1}', "duplicate key 'kind'"),
    (b'{"kind":"start","escrow_id":"1971","inference_id":1,"diff_nonce":1,"x":{"a":1,"a":2}}', "duplicate key 'a'"),
    (b'{"kind" : "start", "escrow_id":"1971","inference_id":1,"diff_nonce":2,"diff_nonce":1}',
     "duplicate key 'diff_nonce'"),
])
def test_classify_rejects_out_of_range_numbers_and_duplicate_keys(raw, reason):
    verdict = classify_line(raw)
    assert isinstance(verdict, Rejected) and reason in verdict.reason, verdict


def test_colons_inside_strings_are_not_duplicates():
    raw = b'{"kind":"epoch","epoch_index":3,"observed_at":"2025-01-02T03:04:05+00:00","note":"a:b:c"}'
    assert isinstance(classify_line(raw), Accepted)


LINES = [
    _j(escrow()),                                                                                  # 1
    _j(START),                                                                                     # 2
    b'{"kind":"confirm_start","escrow_id":"1971","inference_id":100,"diff_nonce":101,"note":1e400}',  # 3
    b'{"kind":"confirm_start","escrow_id":"1971","inference_id":100,"diff_nonce":1e400}',          # 4
    b'{"kind":"bogus","kind":"start","escrow_id":"1971","inference_id":7,"diff_nonce":7}',         # 5
]
WANT = {3: ("1e400", "out of range"), 4: ("1e400", "out of range"), 5: ("duplicate key 'kind'",)}


def test_bad_numbers_and_keys_are_quarantined_and_the_rest_loads(db_url, tmp_path, conn):
    ingest_expecting_quarantine(db_url, tmp_path / "edge.ndjson", conn, LINES, WANT)
    # nothing was stored as null in place of the number, and the duplicate-key line did not load as a start
    assert conn.execute("SELECT count(*) FROM rec.confirm_start_tx").fetchone() == (0,)
    assert conn.execute("SELECT inference_id FROM rec.start_tx").fetchall() == [(100,)]
    assert conn.execute("SELECT lines_committed FROM rec.source").fetchone() == (len(LINES),)

"""A quarantined line that a later valid record supersedes is marked resolved (kept, with the line that resolved it);
one that nothing superseded stays open (indexer.load.resolved)."""
from __future__ import annotations

import json

from tests.support.helpers import escrow, ingest, tx, write_lines

H = "ab" * 32


def _rows(conn) -> dict[tuple[str, int], tuple]:
    """(file name, line) -> (resolved, resolved_by as file name:line) of api.quarantine."""
    out = {}
    for source, line, resolved_at, by in conn.execute(
            "SELECT source, line, resolved_at, resolved_by FROM api.quarantine ORDER BY source, line"):
        out[(source.rsplit("/", 1)[-1], line)] = (resolved_at is not None, by and by.rsplit("/", 1)[-1])
    return out


def _start(inference_id: int, **over) -> dict:
    return {**tx("start", inference_id, inference_id, prompt_hash=H, input_length=10, max_tokens=5), **over}


def test_the_same_file_corrected_resolves_its_quarantined_lines(db_url, conn, tmp_path):
    bad = [escrow(), _start(100, input_length="ten"), b'{"kind": "start", "escrow_id": "1971"',
           _start(102), _start(103, max_tokens=-1)]
    path = write_lines(tmp_path / "day.ndjson", bad)
    ingest(db_url, path)
    assert _rows(conn) == {("day.ndjson", 2): (False, None), ("day.ndjson", 3): (False, None),
                           ("day.ndjson", 5): (False, None)}
    # corrected in place: lines 2 and 3 now load; line 5 is still bad (quarantined again under the new digest)
    write_lines(path, [escrow(), _start(100), _start(101), _start(102), _start(103, max_tokens=-2)])
    ingest(db_url, path)
    got = _rows(conn)  # (the two loads' line 5 are one key here)
    assert {k: v for k, v in got.items() if v[0]} == {("day.ndjson", 2): (True, "day.ndjson:2"),
                                                       ("day.ndjson", 3): (True, "day.ndjson:3")}
    # line 5, from both loads, stays open; the history is kept
    assert conn.execute("SELECT line, count(*) FROM api.quarantine WHERE resolved_at IS NULL GROUP BY line"
                        ).fetchall() == [(5, 2)]
    assert conn.execute("SELECT count(*) FROM rec.quarantine").fetchone()[0] == 4


def test_the_same_record_arriving_valid_from_another_file_resolves_it(db_url, conn, tmp_path):
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [escrow(), _start(100, prompt_hash="zz")]))
    assert _rows(conn) == {("a.ndjson", 2): (False, None)}
    # another record of another key does not resolve it
    ingest(db_url, write_lines(tmp_path / "b.ndjson", [_start(101)]))
    assert _rows(conn) == {("a.ndjson", 2): (False, None)}
    ingest(db_url, write_lines(tmp_path / "c.ndjson", [_start(101), _start(100)]))
    assert _rows(conn) == {("a.ndjson", 2): (True, "c.ndjson:2")}
    stored = conn.execute("SELECT prompt_hash FROM rec.start_tx WHERE inference_id = 100").fetchone()[0]
    assert stored == H


def test_a_record_that_lost_to_the_stored_one_of_its_key_stays_open(db_url, conn, tmp_path):
    """Two txs of one key at different nonces: the higher one is quarantined. The kept one arriving again changes
    nothing, so the quarantined tx is not superseded."""
    low, high = _start(100), {**_start(100), "diff_nonce": 105}
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [escrow(), low]))
    ingest(db_url, write_lines(tmp_path / "b.ndjson", [high]))
    assert _rows(conn) == {("b.ndjson", 1): (False, None)}
    ingest(db_url, write_lines(tmp_path / "c.ndjson", [json.dumps(low).encode() + b" "]))
    assert _rows(conn) == {("b.ndjson", 1): (False, None)}


def test_a_clean_load_without_open_rows_resolves_nothing(db_url, conn, tmp_path):
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [escrow(), _start(100)]))
    assert conn.execute("SELECT count(*) FROM rec.quarantine").fetchone()[0] == 0


def test_searching_for_a_few_keys_finds_what_reading_every_key_finds():
    """The two ways resolved.py reads a batch's keys agree, escaped key text included."""
    from indexer.load import resolved
    from indexer.load.prepare import prepare_block

    recs = [escrow("a\\tb"), escrow("1971"), _start(100), _start(101), _start(7, escrow_id="a\\tb"),
            _start(100, escrow_id="x100")]
    block = b"\n".join(json.dumps(r).encode() for r in recs) + b"\n"
    kinds = prepare_block(1, 1, block).kinds
    for kind in ("escrow", "start"):
        every = resolved._batch_keys(kind, kinds[kind].copy)
        wanted = set(every.values()) | {("nowhere", "1")}
        assert resolved._found_keys(kinds[kind].copy, wanted) == every
        one = next(iter(every.items()))
        assert resolved._found_keys(kinds[kind].copy, {one[1]}) == dict([one])

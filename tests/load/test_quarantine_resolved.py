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


def test_a_quarantined_line_keeps_the_key_it_names_as_the_typer_stores_it(db_url, conn, tmp_path):
    """Each quarantined row carries its record's key, each value as its column prints it (a decimal string and a
    number alike); a line that names no storable key carries an empty key."""
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [
        escrow(), _start(100, prompt_hash="zz"), {**_start(101, prompt_hash="zz"), "inference_id": "101"},
        {**_start(102, prompt_hash="zz"), "inference_id": "0102"}, b'{"kind": "start", "escrow_id": "1971"',
        {**_start(103), "inference_id": -1}, {"kind": "nope", "escrow_id": "1971"}]))
    assert conn.execute("SELECT line, record_key FROM rec.quarantine ORDER BY line").fetchall() == [
        (2, ["1971", "100"]), (3, ["1971", "101"]), (4, ["1971", "102"]), (5, []), (6, []), (7, [])]


def test_resolution_matches_the_stored_key_without_reading_the_line_again(db_url, conn, tmp_path):
    """Once a row's key is read, resolution matches by it: the raw line is not parsed per batch."""
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [escrow(), _start(100, prompt_hash="zz")]))
    conn.execute("UPDATE rec.quarantine SET raw = 'not json'")
    conn.commit()
    ingest(db_url, write_lines(tmp_path / "b.ndjson", [_start(100)]))
    assert _rows(conn) == {("a.ndjson", 2): (True, "b.ndjson:1")}


def test_rows_whose_key_was_never_read_are_read_once_and_resolve(db_url, conn, tmp_path):
    """Rows quarantined before the key column existed (record_key null) get their key from the raw line at the next
    load, then resolve like any other."""
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [escrow(), _start(100, prompt_hash="zz"),
                                                       _start(101, prompt_hash="zz")]))
    conn.execute("UPDATE rec.quarantine SET record_key = NULL")
    conn.commit()
    ingest(db_url, write_lines(tmp_path / "b.ndjson", [_start(101)]))
    assert _rows(conn) == {("a.ndjson", 2): (False, None), ("a.ndjson", 3): (True, "b.ndjson:1")}
    assert conn.execute("SELECT line, record_key FROM rec.quarantine ORDER BY line").fetchall() == [
        (2, ["1971", "100"]), (3, ["1971", "101"])]


def test_a_resumed_load_does_not_resolve_by_rows_of_its_earlier_batches(db_url, conn, tmp_path):
    """Rows the same input stored in an earlier batch are not this batch's: a line that lost to one of them stays
    open when a later batch of the input brings other records of its escrow."""
    from indexer.load.ingest import ingest_paths

    low, high = _start(100), {**_start(100), "diff_nonce": 105}
    ingest(db_url, write_lines(tmp_path / "b.ndjson", [escrow(), high]))
    lines = [escrow(), low] + [_start(200 + i) for i in range(4)]
    ingest_paths(db_url, [str(write_lines(tmp_path / "a.ndjson", lines))], batch_lines=2)
    assert _rows(conn)[("b.ndjson", 2)] == (False, None)


def test_batch_keys_read_escaped_key_text_as_record_key_reads_the_line():
    """A key read back from the batch's COPY text (escapes undone) equals the key read from the raw line."""
    from indexer.load import resolved
    from indexer.load.prepare import prepare_block

    recs = [escrow("a\\tb"), escrow("1971"), _start(100), _start(7, escrow_id="a\\tb"), _start(8, escrow_id="x\ny")]
    raws = [json.dumps(r) for r in recs]
    kinds = prepare_block(1, 1, ("\n".join(raws) + "\n").encode()).kinds
    got = {**resolved._batch_keys("escrow", kinds["escrow"].copy, {1, 2}),
           **resolved._batch_keys("start", kinds["start"].copy, {3, 4, 5})}
    assert got == {n + 1: resolved.record_key(r["kind"], raws[n]) for n, r in enumerate(recs)}

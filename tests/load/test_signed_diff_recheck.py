"""Signed diffs loaded before their escrow: which of two differing records of one diff is kept was chosen without a
signature to check (the bytes that sort first), and is chosen again by the creator's signature once the escrow
record comes (indexer.load.signed_conflicts.recheck_stored), so the result is the one of the escrow loaded first."""
from __future__ import annotations

import pytest

from indexer.load.signed_conflicts import UNCHECKED, _record
from tests.load.test_signed_diff_conflicts import _signed, level, load, quarantine, stored
from tests.support.verify_records import EID, _flip, escrow_record, records, signed_diff_records

GOOD = next(r for r in signed_diff_records() if r["nonce"] == 1)
BAD = _flip(GOOD)  # its altered bytes sort before the genuine ones: kept while no signature can be checked
assert _signed(BAD) < _signed(GOOD)


def _rest() -> list[dict]:
    return [r for r in records() if r["kind"] != "signed_diff"]


def test_the_escrow_loaded_after_its_diffs_lets_the_signature_choose_again(db_url, conn, tmp_path):
    load(db_url, tmp_path, "diffs.ndjson", [GOOD, *(r for r in signed_diff_records() if r["nonce"] > 1), BAD])
    assert stored(conn, 1) == (BAD["content"], BAD["user_sig"])  # no creator yet: the bytes chose
    assert [r[0] for r in quarantine(conn)] == [1]  # the genuine line
    _, summary = load(db_url, tmp_path, "rest.ndjson", _rest())
    assert stored(conn, 1) == (GOOD["content"], GOOD["user_sig"])
    assert level(conn) == ("settled", None)
    assert summary.quarantined == 1
    rows = conn.execute("SELECT q.line, q.reason, q.resolved_at IS NULL, r.uri, q.resolved_line FROM rec.quarantine q "
                        "LEFT JOIN rec.source r ON r.source_id = q.resolved_source_id ORDER BY q.line").fetchall()
    escrow_line = next(n for n, r in enumerate(_rest(), 1) if r["kind"] == "escrow")
    diffs = tmp_path / "diffs.ndjson"
    # the genuine line is stored now: its row resolved by the escrow's line; the altered one is quarantined where
    # it came from, as if the escrow had come first
    assert [(line, open_, uri, at) for line, _, open_, uri, at in rows] == [
        (1, False, str(tmp_path / "rest.ndjson"), escrow_line), (35, True, None, None)]
    assert rows[1][1].startswith(f"{diffs}:35: signed_diff escrow {EID} nonce 1 was stored, then replaced: its user "
                                 f"signature does not pass (user signature recovers to gonka1"), rows[1][1]
    assert rows[1][1].endswith(f"; kept the record at {diffs}:1"), rows[1][1]
    previous = conn.execute("SELECT previous->>'content', line FROM rec.amendment WHERE kind = 'signed_diff' "
                            "AND record_key = %s::jsonb ORDER BY amendment_id", (f'["{EID}", 1]',)).fetchall()
    assert previous == [(BAD["content"], 1)]
    # loading everything again changes nothing
    _, again = load(db_url, tmp_path, "all.ndjson", [*records(), BAD])
    assert (again.quarantined, again.amended) == (1, 0)
    assert stored(conn, 1) == (GOOD["content"], GOOD["user_sig"])


def test_an_escrow_without_a_creator_leaves_the_choice_as_it_was(db_url, conn, tmp_path):
    load(db_url, tmp_path, "diffs.ndjson", [GOOD, BAD])
    load(db_url, tmp_path, "escrow.ndjson", [{k: v for k, v in escrow_record().items() if k != "creator"}])
    assert stored(conn, 1) == (BAD["content"], BAD["user_sig"])
    [(line, _, reason, _)] = quarantine(conn)
    assert line == 1 and UNCHECKED in reason
    # the creator comes with a later reading of the escrow
    load(db_url, tmp_path, "escrow2.ndjson", [escrow_record()])
    assert stored(conn, 1) == (GOOD["content"], GOOD["user_sig"])


def test_a_line_the_creator_does_not_sign_either_stays_where_it_is(db_url, conn, tmp_path):
    forged = dict(GOOD, user_sig="11" * 64 + "00")  # the genuine bytes under another signature: neither passes
    load(db_url, tmp_path, "diffs.ndjson", [forged, BAD])
    before = stored(conn, 1)
    assert before in ((BAD["content"], BAD["user_sig"]), (GOOD["content"], forged["user_sig"]))
    load(db_url, tmp_path, "rest.ndjson", _rest())
    assert stored(conn, 1) == before
    [(line, _, _, _)] = quarantine(conn)
    assert line == (1 if before[1] == BAD["user_sig"] else 2)


@pytest.mark.parametrize("raw", [None, "", "not json", "[1]", '{"escrow_id": null, "nonce": 1}',
                                 '{"escrow_id": "1", "nonce": "x"}', '{"escrow_id": "1", "nonce": 1, "content": 5}'])
def test_a_quarantined_line_that_does_not_read_as_a_signed_diff_is_left_alone(raw):
    assert _record(raw) is None


def test_a_quarantined_line_is_read_back_with_its_key_as_loaded():
    assert _record('{"escrow_id": 124, "nonce": "7", "content": "AA=="}') == {
        "escrow_id": "124", "nonce": 7, "content": "AA=="}


def test_a_line_read_back_that_is_not_a_signed_diff_is_never_stored(db_url, conn, tmp_path):
    load(db_url, tmp_path, "diffs.ndjson", [GOOD, BAD])
    # a row whose raw line does not read as a record (a hand-edited quarantine): skipped, the rest decided
    source = conn.execute("SELECT source_id FROM rec.quarantine").fetchone()[0]
    conn.execute("INSERT INTO rec.quarantine (source_id, line, kind, reason, raw) VALUES (%s, 99, 'signed_diff', %s, "
                 "'{broken')", (source, UNCHECKED))
    conn.commit()
    load(db_url, tmp_path, "rest.ndjson", _rest())
    assert stored(conn, 1) == (GOOD["content"], GOOD["user_sig"])
    assert conn.execute("SELECT resolved_at IS NULL FROM rec.quarantine WHERE line = 99").fetchone() == (True,)

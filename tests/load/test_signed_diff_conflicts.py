"""Two signed_diff records of one diff that differ: the one the creator signed is kept whichever is loaded first, the
other is quarantined with a reason naming its file, line, escrow and nonce (a stored one is replaced, with its
previous content kept in rec.amendment, and quarantined under its own file and line); without a creator to check against, the choice is still the same in either order
(indexer.load.signed_conflicts). The v4.1 release fixture (tests/support/verify_records.py) reaches ``settled``."""
from __future__ import annotations

import base64

import psycopg
import pytest

from indexer.load.signed_conflicts import MAX_REASON
from indexer.load.stored_diffs import signed_diff
from tests.support.helpers import ingest, write_lines
from indexer.verify import proto as pb
from tests.support.verify_kit import user_sign
from tests.support.verify_records import EID, _flip, _fork, records, signed_diff_records

GOOD = next(r for r in signed_diff_records() if r["nonce"] == 10)
BAD = _flip(GOOD)  # one bit of the content changed: the user signature recovers to another address


def _signed(rec: dict) -> tuple[bytes, bytes]:
    """The order the loader keeps records by when the signature cannot choose: signed message, then signature."""
    d = signed_diff(rec["escrow_id"], rec["nonce"], rec["content"], rec["user_sig"], rec.get("post_state_root"),
                    rec.get("state_hash"))
    return d.content, d.user_sig


def load(db_url, tmp_path, name, recs):
    path = write_lines(tmp_path / name, recs)
    return path, ingest(db_url, path)


def level(conn) -> tuple:
    return conn.execute("SELECT level, failed_check FROM api.escrow_verification WHERE escrow_id = %s",
                        (EID,)).fetchone()


def stored(conn, nonce: int = 10) -> tuple:
    return conn.execute("SELECT content, user_sig FROM rec.signed_diff WHERE escrow_id = %s AND nonce = %s",
                        (EID, nonce)).fetchone()


def quarantine(conn) -> list[tuple]:
    return conn.execute("SELECT q.line, q.kind, q.reason, s.uri FROM rec.quarantine q JOIN rec.source s "
                        "USING (source_id) ORDER BY q.source_id, q.line").fetchall()




def _resigned(rec: dict, change) -> dict:
    """``rec`` with its content's fields passed through ``change`` and signed again by the creator."""
    parts = [pb.f_uint(n, v) if w == pb.VARINT else pb.f_msg(n, v)
             for n, w, v in pb.fields(base64.b64decode(rec["content"]))]
    content = b"".join(change(parts))
    return dict(rec, content=base64.b64encode(content).decode(), user_sig=user_sign(content).hex())


# the creator's own signature over a diff the hosts would refuse as signed (start_proof.go @b87a604a
# VerifyDiffUserSig rebuilds the message with their escrow id, in the deterministic encoding)
OTHER_ESCROW = _resigned(GOOD, lambda parts: [pb.f_str(3, "125") if p[0] == 0x1a else p for p in parts])
TWICE = _resigned(GOOD, lambda parts: [*parts[:-1], pb.f_bytes(4, bytes(32)), parts[-1]])

# a bad record -> what the quarantine reason says of it
BADS = {"flipped bit": (BAD, "user signature recovers to gonka1"),
        "signed for another escrow": (OTHER_ESCROW, "the user signed this diff for escrow '125', not '124'"),
        "signed in another encoding": (TWICE, "the user signed bytes the hosts would not take as this diff's: "
                                             "DiffContent: field 4 (post_state_root) is given twice"),
        "content not base64": (dict(GOOD, content="not base64!"), "content is not base64"),
        "no user signature": (dict(GOOD, user_sig=None), "no user signature captured")}


@pytest.mark.parametrize("bad_first", [False, True], ids=["bad line last", "bad line first"])
@pytest.mark.parametrize("bad_kind", sorted(BADS))
def test_a_diff_the_creator_did_not_sign_never_replaces_one_he_did(db_url, conn, tmp_path, bad_first, bad_kind):
    bad, why = BADS[bad_kind]
    files = [("bad.ndjson", [bad]), ("all.ndjson", records())]
    for name, recs in (files if bad_first else files[::-1]):
        load(db_url, tmp_path, name, recs)
    assert stored(conn) == (GOOD["content"], GOOD["user_sig"])
    assert level(conn) == ("settled", None)
    if bad_first:  # the stored bad record is replaced and quarantined where it came from; its content is history
        [(line, kind, reason, uri)] = quarantine(conn)
        assert (line, kind, uri) == (1, "signed_diff", str(tmp_path / "bad.ndjson"))
        assert reason.startswith(f"{uri}:1: signed_diff escrow {EID} nonce 10 was stored, then replaced: its user "
                                 f"signature does not pass ({why}"), reason
        assert f"; kept the record at {tmp_path / 'all.ndjson'}:" in reason, reason
        previous = conn.execute("SELECT previous->>'content' FROM rec.amendment WHERE kind = 'signed_diff' "
                                "AND record_key = %s::jsonb", (f'["{EID}", 10]',)).fetchone()
        assert previous == (bad["content"],)
    else:
        [(line, kind, reason, uri)] = quarantine(conn)
        assert (line, kind) == (1, "signed_diff")
        assert reason.startswith(f"{uri}:1: signed_diff escrow {EID} nonce 10 not stored: its user signature does "
                                 f"not pass ({why}"), reason
        assert f"; kept the stored record from {tmp_path / 'all.ndjson'}:" in reason, reason


@pytest.mark.parametrize("bad_first", [False, True], ids=["bad line last", "bad line first"])
def test_two_records_of_one_diff_in_one_batch_keep_the_signed_one(db_url, conn, tmp_path, bad_first):
    recs = records()
    at = recs.index(GOOD)
    recs[at:at + 1] = [BAD, GOOD] if bad_first else [GOOD, BAD]
    path, summary = load(db_url, tmp_path, "both.ndjson", recs)
    assert summary.quarantined == 1
    assert stored(conn) == (GOOD["content"], GOOD["user_sig"])
    assert level(conn) == ("settled", None)
    [(line, _, reason, _)] = quarantine(conn)
    assert line == at + 1 + (0 if bad_first else 1)
    assert reason.startswith(f"{path}:{line}: signed_diff escrow {EID} nonce 10 not stored: its user signature")
    assert reason.endswith(f"; kept the record at {path}:{at + 1 + (1 if bad_first else 0)}"), reason


@pytest.mark.parametrize("bad_first", [False, True], ids=["bad line last", "bad line first"])
def test_without_the_creator_the_same_record_is_kept_in_either_order(db_url, conn, tmp_path, bad_first):
    pair = [BAD, GOOD] if bad_first else [GOOD, BAD]
    load(db_url, tmp_path, "first.ndjson", pair[:1])
    load(db_url, tmp_path, "second.ndjson", pair[1:])
    kept = min((GOOD, BAD), key=_signed)
    assert stored(conn) == (kept["content"], kept["user_sig"])
    # the one not kept is quarantined under its own file and line, whether it came first (stored, then replaced)
    # or second
    [(line, _, reason, uri)] = quarantine(conn)
    assert (line, uri) == (1, str(tmp_path / ("second.ndjson" if kept is pair[0] else "first.ndjson")))
    assert "the escrow's creator is not loaded, so no signature could be checked" in reason, reason


def test_two_records_the_creator_both_signed_keep_the_same_one_in_either_order(db_url, second_db_url, tmp_path):
    """A user-signed fork (the creator signed two contents for nonce 8): the signature cannot choose, so the bytes
    do; the replay then judges the kept one."""
    fork, original = _fork(8), next(r for r in signed_diff_records() if r["nonce"] == 8)
    load(db_url, tmp_path, "a.ndjson", [*records(), fork])
    load(second_db_url, tmp_path, "b.ndjson", [*[r for r in records() if r != original], fork, original])
    kept = []
    for url in (db_url, second_db_url):
        with psycopg.connect(url) as c:
            kept.append(stored(c, 8))
            [(_, _, reason, _)] = quarantine(c)
            assert "the creator signed both: of records whose signed bytes differ, the one whose bytes sort first " \
                   "is kept" in reason, reason
    assert kept[0] == kept[1]


def host(conn, nonce: int = 10) -> str:
    return conn.execute("SELECT source_host FROM rec.signed_diff WHERE escrow_id = %s AND nonce = %s",
                        (EID, nonce)).fetchone()[0]


@pytest.mark.parametrize("least_first", [True, False], ids=["least host first", "least host last"])
def test_the_same_diff_from_another_host_is_no_conflict_and_the_least_host_names_it(db_url, conn, tmp_path,
                                                                                     least_first):
    other = "http://host-0.example:8080"  # sorts before the fixture's host-a
    recs = [records(), [dict(GOOD, source_host=other)]]
    summaries = [load(db_url, tmp_path, f"{i}.ndjson", part)[1] for i, part in enumerate(recs[::-1] if least_first
                                                                                          else recs)]
    assert summaries[1].quarantined == 0
    assert summaries[1].amended == (0 if least_first else 1)  # a host that sorts after the stored one changes nothing
    assert host(conn) == other
    assert level(conn) == ("settled", None)


def test_lines_of_one_diff_from_several_hosts_in_one_batch_keep_the_least_host(db_url, conn, tmp_path):
    recs = records()
    at = recs.index(GOOD)
    recs[at:at + 1] = [dict(GOOD, source_host="http://host-c.example"), GOOD, dict(GOOD, source_host=None)]
    _, summary = load(db_url, tmp_path, "hosts.ndjson", recs)
    assert summary.quarantined == 0
    assert host(conn) == GOOD["source_host"]  # host-a; a line naming no host names none


def test_a_reason_quoting_a_long_file_name_stays_one_bounded_line(db_url, conn, tmp_path):
    deep = tmp_path / ("d" * 200) / ("e\n" * 100) / ("f" * 200)  # a newline in a name: the reason stays one line
    deep.mkdir(parents=True)
    load(db_url, tmp_path, "all.ndjson", records())
    load(db_url, deep, "bad.ndjson", [BAD])
    [(_, _, reason, _)] = quarantine(conn)
    assert len(reason) == MAX_REASON and "\n" not in reason and reason.endswith("…"), reason

"""The verification stage on stored evidence that is missing or malformed, through the database: what is only missing
is not checked (never a failure), what is malformed fails with a reason saying what is wrong."""
from __future__ import annotations

import base64

from indexer.verify import proto as pb
from indexer.wire.diffs import user_signed_bytes
from tests.support.helpers import ingest, write_lines
from tests.support.verify_kit import user_sign
from tests.support.verify_records import EID, ROOTS, b64, records, signed_diff_records


def load(db_url, tmp_path, recs, name="in.ndjson"):
    return ingest(db_url, write_lines(tmp_path / name, recs))


def row(conn, eid=EID) -> dict:
    cur = conn.execute("SELECT * FROM replay.escrow_verification WHERE escrow_id = %s", (eid,))
    return dict(zip([c.name for c in cur.description], cur.fetchone()))


def _with_diffs(diffs: list[dict]) -> list[dict]:
    return [r for r in records() if r["kind"] != "signed_diff"] + diffs


def _served_bare(rec: dict, **changes) -> dict:
    """A stored diff as a build that serves ``DiffContent{nonce, txs}`` gives it: fields 3 and 4 cut off."""
    whole = base64.b64decode(rec["content"])
    tail = pb.f_str(3, EID) + pb.f_bytes(4, bytes.fromhex(rec["post_state_root"]))
    assert whole.endswith(tail)
    return {**rec, "content": b64(whole[:-len(tail)]), "post_state_root": None, **changes}


def test_a_diff_stored_with_no_signed_root_anywhere_is_not_checked_not_failed(db_url, conn, tmp_path):
    from indexer.replay.verification import NO_ROOT

    diffs = signed_diff_records()
    diffs[6] = _served_bare(diffs[6], state_hash=None)
    load(db_url, tmp_path, _with_diffs(diffs))
    got = row(conn)
    assert (got["level"], got["failed_check"], got["failed_nonce"]) == ("none", None, 7), got["failure"]
    assert got["failure"] == f"rec.signed_diff escrow {EID} nonce 7: {NO_ROOT}"


def test_a_diff_with_neither_root_nor_user_signature_still_fails_signed(db_url, conn, tmp_path):
    diffs = signed_diff_records()
    diffs[6] = _served_bare(diffs[6], state_hash=None, user_sig=None)
    load(db_url, tmp_path, _with_diffs(diffs))
    got = row(conn)
    assert (got["failed_check"], got["failed_nonce"]) == ("signed", 7)
    assert got["failure"].endswith("no user signature captured")


def test_content_with_a_truncated_field_5_fails_saying_it_is_unreadable(db_url, conn, tmp_path):
    """Field 5 (sealed inference ids) with a packed varint cut short: the content is base64 and is what the user
    signed, so the signed check passes and the replay names the broken field."""
    content = bytes.fromhex("08012a0180")  # nonce 1; field 5, one byte: a varint whose continuation never comes
    signed = user_signed_bytes(content, EID, ROOTS[1])
    diffs = signed_diff_records()
    diffs[0] = {**diffs[0], "content": b64(content), "user_sig": user_sign(signed).hex()}
    load(db_url, tmp_path, _with_diffs(diffs))
    got = row(conn)
    assert (got["level"], got["failed_check"], got["failed_nonce"]) == ("signed", "replayed", 1), got["failure"]
    assert got["failure"].startswith("DiffContent unreadable: ") and "base64" not in got["failure"]

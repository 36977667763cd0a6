"""Tampered records of the v4.1 release fixture (tests/support/verify_records.py) loaded through ``ingest`` into
PostgreSQL: api.escrow_verification names the check, the nonce and the reason of each, and what the chain or the
hosts accept stays ``settled`` (the pure checks are tests/verify/test_verify_tamper.py)."""
from __future__ import annotations

import base64
import dataclasses

import pytest

from indexer.verify import proto as pb, settlement as st
from tests.support.helpers import ingest, write_lines
from tests.support.verify_kit import KEYS, user_sign
from tests.support.verify_records import (EID, ROOTS, SOURCE, b64, escrow_record, records, settle_msg,
                                          settlement_record)

COLUMNS = "level, failed_check, failed_nonce, failure, nonces_checked"


def _verification(conn) -> dict:
    cur = conn.execute(f"SELECT {COLUMNS} FROM api.escrow_verification WHERE escrow_id = %s", (EID,))
    return dict(zip([c.name for c in cur.description], cur.fetchone()))


def _with(replace: dict[str, dict] | None = None, diffs: dict[int, dict] | None = None) -> list[dict]:
    """The fixture's records with the escrow or settlement record replaced, or signed diffs by nonce."""
    out = []
    for r in records():
        if r["kind"] in (replace or {}):
            r = replace[r["kind"]]
        elif r["kind"] == "signed_diff" and r["nonce"] in (diffs or {}):
            r = diffs[r["nonce"]]
        out.append(r)
    return out


def _resigned_diff(nonce: int, content: bytes) -> dict:
    return {"kind": "signed_diff", "escrow_id": EID, "nonce": nonce, "content": b64(content),
            "user_sig": user_sign(content).hex(), "post_state_root": ROOTS[nonce].hex(),
            "state_hash": ROOTS[nonce].hex(), "source_host": SOURCE}


def _content(nonce: int) -> bytes:
    return base64.b64decode(next(r for r in records() if r["kind"] == "signed_diff" and r["nonce"] == nonce)
                            ["content"])


def _consistent(msg: st.SettleMsg) -> st.SettleMsg:
    msg.state_root = st.settlement_root(msg)
    msg.signatures = [st.SlotSignature(i, st.sign_state(KEYS[i], msg.state_root, int(EID), msg.nonce))
                      for i in range(4)]
    return msg


def _v_plus_4() -> dict:
    msg = settle_msg()
    msg.signatures = [dataclasses.replace(s, signature=s.signature[:64] + bytes((s.signature[64] + 4,)))
                      for s in msg.signatures]
    return settlement_record(msg)


def _repeated_root() -> bytes:
    parts = [pb.f_uint(n, v) if w == pb.VARINT else pb.f_msg(n, v) for n, w, v in pb.fields(_content(7))]
    return b"".join([*parts[:-1], pb.f_bytes(4, bytes(32)), parts[-1]])


def _other_escrow_diff() -> bytes:
    parts = [pb.f_uint(n, v) if w == pb.VARINT else pb.f_msg(n, v) for n, w, v in pb.fields(_content(5))]
    return b"".join(p if p[0] != 0x1a else pb.f_str(3, "125") for p in parts)


CASES = {
    # kind: (records, level, failed check, nonce, reason fragment)
    "host signatures with dcrd's compressed-key recovery code": (
        lambda: _with({"settlement": _v_plus_4()}), "settled", None, None, None),
    "settlement version other than the escrow's": (
        lambda: _with({"settlement": settlement_record(_consistent(dataclasses.replace(settle_msg(),
                                                                                         version="v4.2")))}),
        "replayed", "settled", 34, "the settlement's version 'v4.2' is not the escrow's protocol version 'v4.1'"),
    "a repeated slot signature": (
        lambda: _with({"settlement": settlement_record(dataclasses.replace(
            settle_msg(), signatures=[*settle_msg().signatures, settle_msg().signatures[0]]))}),
        "replayed", "settled", 34, "duplicate signature for slot 0"),
    "a diff the user signed with its root given twice": (
        lambda: _with(diffs={7: _resigned_diff(7, _repeated_root())}), "none", "signed", 7,
        "DiffContent: field 4 (post_state_root) is given twice"),
    "a diff the same user signed for another escrow": (
        lambda: _with(diffs={5: _resigned_diff(5, _other_escrow_diff())}), "none", "signed", 5,
        "the user signed this diff for escrow '125', not '124'"),
    "an escrow with an empty protocol version": (
        lambda: _with({"escrow": escrow_record(protocol_version="")}), "none", None, None, None),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_tampering_is_named_in_the_view(db_url, conn, tmp_path, kind):
    make, level, check, nonce, reason = CASES[kind]
    ingest(db_url, write_lines(tmp_path / "in.ndjson", make()))
    row = _verification(conn)
    assert (row["level"], row["failed_check"], row["failed_nonce"]) == (level, check, nonce), row["failure"]
    if reason is not None:
        assert reason in row["failure"], row["failure"]

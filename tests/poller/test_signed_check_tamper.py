"""The poller's signed check (indexer.poller.decode.check_signed) against logs a lying member could serve that carry
the creator's own signatures: a diff the same user signed for another escrow, in the whole-``DiffContent`` form
(escrow id and root inside the signed bytes), is this log's lie and is refused as such (LogRejected: the member is
skipped and the next one asked, tests/poller/test_poller_lying.py), never taken nor failing the escrow; a diff
whose txs were put in another order fails at its nonce."""
from __future__ import annotations

import base64
import hashlib

import coincurve
import pytest

from indexer.devnet.keys import USER, devnet_secret
from indexer.poller.decode import LogRejected, check_signed, decode_entries
from indexer.verify import proto as pb
from indexer.verify.signatures import address_of_pubkey
from indexer.wire.diffs import diff_contents_from_host_json
from tests.poller.test_signed_check import served  # noqa: F401 (the devnet escrow's served log, seed 11)

SEED = 11  # the seed of the ``served`` scenario


def _user_key(creator: str) -> coincurve.PrivateKey:
    key = coincurve.PrivateKey(devnet_secret(SEED, USER))
    assert address_of_pubkey(key.public_key.format()) == creator
    return key


def _whole(entry: dict, escrow_id: str, key: coincurve.PrivateKey) -> dict:
    """The entry served as the whole DiffContent the user signs (nonce, txs, escrow_id, post_state_root), signed by
    the user for ``escrow_id``."""
    diff = entry["diff"]
    root = base64.b64decode(diff.get("post_state_root") or entry["state_hash"])
    content = base64.b64decode(diff["txs"]) + pb.f_str(3, escrow_id) + pb.f_bytes(4, root)
    signature = key.sign_recoverable(content, hasher=lambda m: hashlib.sha256(m).digest())
    return {**entry, "diff": {**diff, "txs": base64.b64encode(content).decode(),
                              "user_sig": base64.b64encode(signature).decode()}}


def test_a_whole_diff_the_user_signed_for_this_escrow_passes(served):  # noqa: F811
    eid, version, creator, entries = served
    whole = [_whole(e, eid, _user_key(creator)) for e in entries]
    check_signed(eid, creator, diff_contents_from_host_json(whole, version, eid))


def test_a_diff_the_user_signed_for_another_escrow_is_a_rejected_log(served):  # noqa: F811
    eid, version, creator, entries = served
    other = str(int(eid) + 1)
    at = 2
    nonce = entries[at]["diff"]["nonce"]
    copied = [*entries[:at], _whole(entries[at], other, _user_key(creator)), *entries[at + 1:]]
    want = rf"^escrow {eid} nonce {nonce}: signed check failed: the diff is for escrow '{other}'$"
    with pytest.raises(LogRejected, match=want):
        check_signed(eid, creator, diff_contents_from_host_json(copied, version, eid))
    with pytest.raises(LogRejected, match=want):
        decode_entries(eid, version, copied, False, "member", creator)


def test_an_entry_that_names_another_escrow_beside_its_content_is_a_rejected_log(served):  # noqa: F811
    eid, version, creator, entries = served
    nonce = entries[1]["diff"]["nonce"]
    named = {**entries[1], "diff": {**entries[1]["diff"], "escrow_id": "9999"}}
    with pytest.raises(LogRejected, match=rf"^escrow {eid} nonce {nonce}: signed check failed: the diff is for "
                                          rf"escrow '9999'$"):
        check_signed(eid, creator, diff_contents_from_host_json([entries[0], named, *entries[2:]], version, eid))


def test_txs_put_in_another_order_fail_at_their_nonce(served):  # noqa: F811
    eid, version, creator, entries = served
    at = next(i for i, e in enumerate(entries)
              if len({v for n, _, v in pb.fields(base64.b64decode(e["diff"]["txs"])) if n == 2}) > 1)
    parts = pb.fields(base64.b64decode(entries[at]["diff"]["txs"]))
    txs = [pb.f_msg(n, v) for n, w, v in parts if n == 2][::-1]
    rest = [pb.f_uint(n, v) if w == pb.VARINT else pb.f_bytes(n, v) for n, w, v in parts if n != 2]
    diff = {**entries[at]["diff"], "txs": base64.b64encode(b"".join(rest + txs)).decode()}
    nonce = diff["nonce"]
    lie = [*entries[:at], {**entries[at], "diff": diff}, *entries[at + 1:]]
    with pytest.raises(LogRejected, match=rf"^escrow {eid} nonce {nonce}: signed check failed: user signature "
                                          rf"recovers to gonka1\w+, the escrow creator is {creator}$"):
        check_signed(eid, creator, diff_contents_from_host_json(lie, version, eid))

"""A served diff checked end to end on the v4.1 release fixture (tests/support/verify_kit.py): the user's signature
over the exact DiffContent bytes, the txs decoded with every host signature recovered (executor receipts against the
state), and the replayed root equal to the upstream vector signed in the diff, at all 34 nonces."""
from __future__ import annotations

import json

import coincurve
import pytest

from indexer.verify import apply, diff, proto as pb, signatures as sig
from tests.support.verify_kit import (ESCROW, USER, VECTORS, diff_content, error_miss, script, session, user_sign, v5,
                                      wire_tx)


def _served():
    roots = [bytes.fromhex(r) for r in json.loads(VECTORS.read_text())]
    for nonce, txs in enumerate(script(), start=1):
        content = diff_content(nonce, [wire_tx(t) for t in txs], roots[nonce])
        yield nonce, content, user_sign(content)


def test_every_served_fixture_diff_verifies_against_the_upstream_root():
    s = session()
    for nonce, content, user_sig in _served():
        assert diff.user_signer(content, user_sig, USER) == USER
        parsed = diff.read_diff_content(content)
        assert (parsed.nonce, parsed.escrow_id) == (nonce, ESCROW)
        assert s.apply(nonce, diff.decode_txs(parsed, ESCROW)) == parsed.post_state_root, f"nonce {nonce}"
    assert s.latest_nonce == 34


def test_an_altered_tx_fails_the_user_signature():
    nonce, content, user_sig = next(_served())
    altered = content.replace(b"llama", b"llamb")
    with pytest.raises(diff.DiffError, match="user signature recovers to gonka1.*, the escrow creator is"):
        diff.user_signer(altered, user_sig, USER)
    with pytest.raises(diff.DiffError, match="user signature: signature is 64 bytes"):
        diff.user_signer(content, user_sig[:64], USER)


def test_a_host_key_cannot_sign_for_the_user():
    _, content, _ = next(_served())
    with pytest.raises(diff.DiffError, match="the escrow creator is"):
        diff.user_signer(content, user_sign(content, coincurve.PrivateKey.from_int(1)), USER)


def test_a_wrong_root_or_forged_receipt_is_caught_by_the_replay():
    s = session()
    served = list(_served())
    for nonce, content, _ in served[:1]:
        s.apply(nonce, diff.decode_txs(diff.read_diff_content(content), ESCROW))
    confirm = diff.decode_txs(diff.read_diff_content(served[1][1]), ESCROW)
    good = confirm[0]["executor_sig"]
    forged = dict(confirm[0], executor_sig=good[:-1] + bytes([1 - good[64]]))  # the other R: another key
    with pytest.raises(apply.ApplyError, match="slot 1: signed by gonka1.*neither"):
        s.apply(2, [forged])
    with pytest.raises(apply.ApplyError, match="executor receipt: signature recovery byte v = 7"):
        s.apply(2, [dict(confirm[0], executor_sig=confirm[0]["executor_sig"][:-1] + b"\x07")])
    assert s.apply(2, confirm) != bytes(32)


@pytest.mark.parametrize("data, message", [
    (pb.f_uint(6, 1), "DiffContent: field 6 with wire type 0"),
    (pb.f_bytes(3, b"\xff"), "escrow_id is not UTF-8"),
])
def test_malformed_diff_content_is_refused(data, message):
    with pytest.raises(diff.DiffError, match=message):
        diff.read_diff_content(data)


def test_sealed_ids_are_read_packed_or_not():
    packed = pb.f_bytes(5, pb.uvarint(3) + pb.uvarint(300))
    assert diff.read_diff_content(packed + pb.f_uint(5, 7)).sealed_inference_ids == [3, 300, 7]


def _content(*txs, escrow=ESCROW):
    return diff.read_diff_content(diff_content(1, list(txs), bytes(32), escrow))


@pytest.mark.parametrize("tx, message", [
    (pb.f_msg(12, b""), "tx 0: DevshardTx member 12 is not in this module's table"),
    (pb.f_uint(1, 1), "exactly one member"),
    (pb.f_msg(1, b"") + pb.f_msg(2, b""), "exactly one member"),
    (pb.f_msg(1, pb.f_uint(10, 1)), r"tx 0 \(start\): field 10 is not in this module's table"),
    (pb.f_msg(1, pb.f_bytes(1, b"x")), r"\(start\): field 1 \(inference_id\) has wire type 2"),
    (pb.f_msg(1, pb.f_bytes(3, b"\xff")), r"field 3 \(model\) is not UTF-8"),
    (pb.f_msg(4, pb.f_uint(1, 1) + pb.f_uint(9, 1)), r"\(timeout\): field 9 with wire type 0"),
    (pb.f_msg(4, pb.f_msg(3, pb.f_uint(1, 0)) + pb.f_uint(2, 2)), r"\(timeout\): signature is 0 bytes"),
])
def test_malformed_txs_are_refused_with_nonce_and_index(tx, message):
    with pytest.raises(diff.DiffError, match=message):
        diff.decode_txs(_content(tx), ESCROW)


def test_a_proposer_signature_that_recovers_to_no_key_is_refused_where_the_session_checks_it():
    """The hosts check a proposer's signature only where the tx takes effect (a repeated validation is passed over
    first, machine.go "after dedup"), so the decode keeps the reason and the session refuses it there."""
    tx, = diff.decode_txs(_content(pb.f_msg(3, pb.f_uint(1, 1) + pb.f_bytes(6, b"short"))), ESCROW)
    assert isinstance(tx["signer"], sig.Unrecovered)
    assert tx["signer"] == "proposer signature: signature is 5 bytes, expected 65 (r ‖ s ‖ v)"


def test_reveal_seed_is_ignored_finalize_and_negative_times_decode():
    txs = diff.decode_txs(_content(pb.f_msg(7, pb.f_uint(1, 3)), pb.f_msg(8, b""),
                                   pb.f_msg(1, pb.f_uint(1, 1) + pb.f_uint(6, -5))), ESCROW)
    assert txs[0] == {"kind": "finalize", "tx_index": 1}  # the ignored reveal_seed keeps its place in the count
    assert (txs[1]["kind"], txs[1]["started_at"], txs[1]["model"], txs[1]["tx_index"]) == ("start", -5, "", 2)
    assert len(txs) == 2


def test_a_diff_for_another_escrow_is_refused():
    with pytest.raises(diff.DiffError, match="nonce 1: diff is for escrow 'other', not 'escrow-journal'"):
        diff.decode_txs(_content(escrow="other"), ESCROW)


def test_the_v5_members_decode():
    vote = pb.f_uint(1, 2) + pb.f_bool(2, True) + pb.f_bytes(3, b"s" * 65)
    txs = diff.decode_txs(_content(
        pb.f_msg(9, pb.concat((pb.f_uint(1, 1), pb.f_uint(2, 5), pb.f_uint(3, 10), pb.f_uint(4, 5),
                               pb.f_str(5, "operator")))),
        pb.f_msg(10, pb.concat((pb.f_uint(1, 3), pb.f_uint(2, 4242), pb.f_bytes(3, b"h"), pb.f_uint(4, 5),
                                pb.f_str(5, "forced"), pb.f_msg(6, pb.f_uint(1, 1)), pb.f_msg(6, pb.f_uint(1, 2))))),
        pb.f_msg(11, pb.concat((pb.f_uint(1, 3), pb.f_uint(2, 1), pb.f_uint(3, 4), pb.f_uint(6, 1),
                                pb.f_bytes(8, b"sig")))),
        pb.f_msg(14, pb.f_uint(1, 7) + pb.f_msg(2, vote) + pb.f_msg(2, vote))), ESCROW, "v5")
    assert txs[0] == {"kind": "force_height_sync_turn", "trigger_nonce": 1, "end_nonce": 5, "anchor_k": 10,
                      "slots_num": 5, "reason": "operator", "tx_index": 0}
    assert (txs[1]["kind"], txs[1]["observed_height"], txs[1]["sync_vector"]) == (
        "heartbeat", 4242, [pb.f_uint(1, 1), pb.f_uint(1, 2)])
    assert (txs[2]["kind"], txs[2]["slot_id"], txs[2]["sync_state"], txs[2]["host_sig"]) == ("height_ack", 4, 1, b"sig")
    assert txs[3] == {"kind": "error_miss", "inference_id": 7, "votes": [(2, True, b"s" * 65)] * 2, "tx_index": 3}


def test_a_member_or_field_outside_the_version_is_refused():
    with pytest.raises(diff.DiffError, match=r"tx 0: DevshardTx member 9 \(force_height_sync_turn\) is not in "
                                             r"protocol version 'v4.1'"):
        diff.decode_txs(_content(pb.f_msg(9, b"")), ESCROW, "v4.1")
    with pytest.raises(diff.DiffError, match=r"member 14 \(error_miss\) is not in protocol version 'v4.1'"):
        diff.decode_txs(_content(pb.f_msg(14, b"")), ESCROW, "v4.1")
    sealed = diff_content(1, [], bytes(32)) + pb.f_bytes(5, pb.uvarint(3))
    assert diff.read_diff_content(sealed, "v4.1").sealed_inference_ids == [3]
    with pytest.raises(diff.DiffError, match="field 5 \\(sealed_inference_ids\\) is not in the DiffContent of "
                                             "protocol version 'v5'"):
        diff.read_diff_content(sealed, "v5")


def test_a_served_v5_error_miss_verifies_end_to_end():
    s = v5(3)
    tx = error_miss(1)
    votes = b"".join(pb.f_msg(2, pb.f_uint(1, slot) + pb.f_bool(2, accept) + pb.f_bytes(3, signature))
                     for slot, accept, signature in tx["votes"])
    content = diff.read_diff_content(diff_content(4, [pb.f_msg(14, pb.f_uint(1, 1) + votes)], bytes(32)), "v5")
    s.apply(4, diff.decode_txs(content, ESCROW, "v5"))
    assert s.state.live[1].status == 6 and s.state.host_stats[1].missed == 1

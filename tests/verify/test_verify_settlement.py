"""The settlement message: golden serializations (/work/shared/data/upstream-vectors/settle-msg-goldens/, copied from
qdanik/gonka @8a338499 / 0dd3bffe ``devshard/cmd/gateway/chain/testdata/txgold/``) decode and re-encode byte for byte,
and verify_settlement accepts a settlement of the v4.1 release fixture's final state exactly when the chain's
``VerifyDevshardSettlement`` (gonka-ai/gonka @1529fbc1) would."""
from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import coincurve
import pytest

from indexer.verify import proto as pb, settlement as st, state_root as sr
from tests.support.verify_kit import HOSTS, KEYS, VECTORS, after

GOLDEN = Path("/work/shared/data/upstream-vectors/settle-msg-goldens")


def _golden(name: str) -> bytes:
    return base64.b64decode((GOLDEN / name).read_text().strip())


def test_golden_messages_decode_to_their_fields_and_reencode_byte_for_byte():
    full = st.decode_settle_msg(_golden("settle_msg_full.b64"))
    assert (full.settler, full.escrow_id, full.state_root, full.nonce, full.rest_hash, full.fees, full.version) == (
        "gonka1settler" + "0" * 25, 123, b"fixed-state-root-32-bytes-long!", 456, b"fixed-rest-hash-bytes", 789,
        "v1.2.3")
    assert [dataclasses.astuple(h)[:6] for h in full.host_stats] == [(1, 2, 3, 400, 5, 6), (7, 8, 9, 1000, 11, 12)]
    assert [(s.slot_id, s.signature) for s in full.signatures] == [(1, b"fixed-signature-one"),
                                                                   (7, b"fixed-signature-two")]
    assert len(full.state_root) == 31  # the golden pins the wire form only: the chain would refuse this root
    assert not full.unknown and st.encode_settle_msg(full) == _golden("settle_msg_full.b64")

    empty = st.decode_settle_msg(_golden("settle_msg_empty_optional.b64"))
    assert (empty.escrow_id, empty.host_stats, empty.signatures) == (124, [], [])
    assert st.encode_settle_msg(empty) == _golden("settle_msg_empty_optional.b64")

    hs = st.decode_host_stats(_golden("settlement_host_stats.b64"))
    assert dataclasses.astuple(hs)[:6] == (42, 3, 1, 555, 10, 9)
    assert st.encode_host_stats(hs) == _golden("settlement_host_stats.b64")
    one = st.decode_slot_signature(_golden("slot_signature.b64"))
    assert (one.slot_id, one.signature) == (42, b"standalone-fixed-signature")


def test_unknown_fields_are_kept_and_reencoded():
    data = _golden("settle_msg_full.b64") + pb.f_uint(15, 7) + pb.f_bytes(16, b"later")
    msg = st.decode_settle_msg(data)
    assert msg.unknown == [(15, 0, 7), (16, 2, b"later")]
    assert st.encode_settle_msg(msg) == data
    stats = st.decode_host_stats(pb.f_uint(1, 2) + pb.f_uint(7, 3))  # newer chains: validated / finished
    assert stats.unknown == [(7, 0, 3)] and st.encode_host_stats(stats) == pb.f_uint(1, 2) + pb.f_uint(7, 3)
    sig_extra = st.decode_slot_signature(pb.f_uint(1, 1) + pb.f_uint(3, 9))
    assert sig_extra.unknown == [(3, 0, 9)]


@pytest.mark.parametrize("data, message", [
    (pb.f_uint(1, 5), "MsgSettleDevshardEscrow field 1: wire type 0, expected 2"),
    (pb.f_bytes(2, b"x"), "field 2: wire type 2, expected 0"),
    (pb.f_uint(6, 1), "field 6: wire type 0"),
    (pb.f_uint(7, 1), "field 7: wire type 0"),
    (pb.f_msg(6, pb.f_bytes(1, b"x")), "host_stats field 1: wire type 2"),
    (pb.f_msg(7, pb.f_bytes(1, b"x")), "signature field 1: wire type 2"),
    (pb.f_msg(7, pb.f_uint(2, 1)), "signature field 2: wire type 0"),
    (pb.f_bytes(9, b"\xff"), "version: not UTF-8"),
    (b"\x0a\x05ab", "length 5 runs past the end"),
    (b"\x10\xff", "truncated varint"),
    (b"\x10" + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
    (b"\x00\x01", "field number 0"),
    (b"\x0d\x00\x00\x00\x00", "unsupported wire type 5"),
])
def test_malformed_messages_are_refused_with_the_field_named(data, message):
    with pytest.raises(pb.ProtoError, match=message):
        st.decode_settle_msg(data)


ESCROW_ID = 124


def _final():
    """The fixture's final state (nonce 34, phase Settlement) and a settlement message for it."""
    s = after(34)
    assert s.state.phase == sr.SETTLEMENT
    stats = [st.HostStatsEntry(slot, h.missed, h.invalid, h.cost, h.required_validations, h.completed_validations)
             for slot, h in sorted(s.state.host_stats.items())]
    msg = st.SettleMsg(settler="gonka1creator", escrow_id=ESCROW_ID, state_root=s.root(), nonce=34,
                       rest_hash=sr.rest_hash(s.state), host_stats=stats, fees=s.state.fees, version="v4.1")
    return s, msg


def _escrow(**kw):
    base = dict(escrow_id=ESCROW_ID, creator="gonka1creator", amount=1_000_000, slots=tuple(HOSTS), max_nonce=1000,
                approved_versions=("v4.1", "v5"))
    return st.Escrow(**{**base, **kw})


def _sign(msg, slots, keys=KEYS):
    msg.signatures = [st.SlotSignature(i, st.sign_state(keys[i], msg.state_root, ESCROW_ID, msg.nonce))
                      for i in slots]
    return msg


def test_the_final_v41_root_is_the_settlement_root_and_a_quorum_settles():
    s, msg = _final()
    assert msg.state_root.hex() == json.loads(VECTORS.read_text())[34]
    assert st.settlement_root(msg) == msg.state_root  # phase byte 0x02: the root the last diff signed
    check = st.verify_settlement(_sign(msg, [0, 1, 2, 3]), _escrow())
    assert (check.votes, check.quorum, check.total_cost) == (4, 4, sum(h.cost for h in msg.host_stats))
    assert check.signers == {i: HOSTS[i] for i in range(4)}
    again = st.decode_settle_msg(st.encode_settle_msg(msg))
    assert st.verify_settlement(again, _escrow()).root == msg.state_root


def test_an_active_phase_root_is_not_a_settlement_root():
    s = after(28)
    assert s.state.phase == sr.ACTIVE
    stats = [st.HostStatsEntry(slot, h.missed, h.invalid, h.cost) for slot, h in sorted(s.state.host_stats.items())]
    msg = st.SettleMsg(settler="gonka1creator", escrow_id=ESCROW_ID, state_root=s.root(), nonce=28,
                       rest_hash=sr.rest_hash(s.state), host_stats=stats, version="v4.1")
    with pytest.raises(st.SettlementError, match="state_root mismatch"):
        st.verify_settlement(_sign(msg, range(5)), _escrow())


WARM = coincurve.PrivateKey.from_int(77)
WARM_ADDR = st.sig.address_of_pubkey(WARM.public_key.format())


def test_a_warm_key_signs_for_its_slot_only_with_a_grant():
    _, msg = _final()
    keys = [WARM, *KEYS[1:]]
    _sign(msg, [0, 1, 2, 3], keys)
    with pytest.raises(st.SettlementError, match=f"slot 0 recovered {WARM_ADDR}, expected {HOSTS[0]}"):
        st.verify_settlement(msg, _escrow())
    check = st.verify_settlement(msg, _escrow(), lambda granter, grantee: (granter, grantee) == (HOSTS[0], WARM_ADDR))
    assert check.signers[0] == WARM_ADDR


def _mutate(msg, **kw):
    return dataclasses.replace(msg, **kw)


@pytest.mark.parametrize("change, escrow, message", [
    ({}, {"settled": True}, "escrow 124 already settled"),
    ({"settler": "gonka1other"}, {}, "settler gonka1other is not the escrow creator"),
    ({"version": ""}, {}, "version is required"),
    ({}, {"max_nonce": 33}, "nonce 34 exceeds maximum 33"),
    ({"version": "v" * 129}, {"approved_versions": ()}, "version exceeds maximum length of 128"),
    ({}, {"approved_versions": ("v5",)}, "'v4.1' is not listed"),
    ({"state_root": b"short"}, {}, "state_root must be 32 bytes, got 5"),
    ({"fees": 1}, {}, "state_root mismatch"),
    ({"signatures": "dup"}, {}, "duplicate signature for slot 0"),
    ({"signatures": "range"}, {}, "slot_id 9 out of range"),
    ({"signatures": "bad"}, {}, "failed to recover address for slot 0: signature is 3 bytes"),
    ({"signatures": "three"}, {}, "insufficient quorum: 3 slot votes, need 4"),
    ({}, {"amount": 100}, "total debit 480 \\(cost 480 \\+ fees 0\\) exceeds escrow amount 100"),
])
def test_settlements_the_chain_refuses_are_refused_with_its_reason(change, escrow, message):
    _, msg = _final()
    _sign(msg, [0, 1, 2, 3])
    sigs = change.pop("signatures", None)
    if sigs == "dup":
        msg.signatures.append(msg.signatures[0])
    elif sigs == "range":
        msg.signatures.append(st.SlotSignature(9, msg.signatures[0].signature))
    elif sigs == "bad":
        msg.signatures[0] = st.SlotSignature(0, b"abc")
    elif sigs == "three":
        msg.signatures = msg.signatures[:3]
    with pytest.raises(st.SettlementError, match=message):
        st.verify_settlement(_mutate(msg, **change), _escrow(**escrow))


def _resigned(stats, nonce=34, fees=0):
    _, msg = _final()
    msg = _mutate(msg, host_stats=stats, nonce=nonce, fees=fees)
    msg.state_root = st.settlement_root(msg)
    return _sign(msg, [0, 1, 2, 3])


@pytest.mark.parametrize("stats, nonce, fees, message", [
    ([st.HostStatsEntry(0, missed=7)], 34, 0, "slot 0 missed count 7 exceeds assigned per slot 6"),
    ([st.HostStatsEntry(1, missed=6, invalid=2)], 34, 0, "slot 1 invalid count 2 exceeds completed per slot 1"),
    ([st.HostStatsEntry(2, cost=2**64 - 1), st.HostStatsEntry(3, cost=1)], 34, 0, "total cost overflow"),
    ([st.HostStatsEntry(2, cost=2**64 - 1)], 34, 1, "total cost plus fees overflow"),
    ([st.HostStatsEntry(0), st.HostStatsEntry(0)], 34, 0, "duplicate host_stats slot_id 0"),
])
def test_host_stats_bounds_are_the_chains(stats, nonce, fees, message):
    with pytest.raises(st.SettlementError, match=message):
        st.verify_settlement(_resigned(stats, nonce, fees), _escrow())


def test_assigned_upper_bound_matches_the_routing():
    # nonce 1..34 with 5 slots: slot 0 executes 5, 10, …, 30 (6); slot 4 executes 4, 9, …, 34 (7)
    assert [st.assigned_upper_bound(34, 5, i) for i in range(5)] == [6, 7, 7, 7, 7]
    assert st.assigned_upper_bound(3, 5, 4) == 0 and st.assigned_upper_bound(4, 5, 0) == 0
    with pytest.raises(st.SettlementError, match="slot count cannot be zero"):
        st.assigned_upper_bound(1, 0, 0)
    with pytest.raises(st.SettlementError, match="slot 5 out of range for slot count 5"):
        st.assigned_upper_bound(1, 5, 5)

"""``MsgSettleDevshardEscrow``: decoding the settlement transaction and checking it as the chain does.

Field numbers (pinned by the golden serializations of qdanik/gonka @8a338499 ``devshard/cmd/gateway/chain/testdata/
txgold/``): 1 settler, 2 escrow_id, 3 state_root, 4 nonce, 5 rest_hash, 6 host_stats (``DevshardSettlementHostStats``
1 slot_id, 2 missed, 3 invalid, 4 cost, 5 required_validations, 6 completed_validations), 7 signatures
(``SlotSignature`` 1 slot_id, 2 signature), 8 fees, 9 version. Fields this module does not know are kept in
``unknown`` (newer chains add host-stats fields), never dropped.

:func:`verify_settlement` follows gonka-ai/gonka ``inference-chain/x/inference/keeper/devshard_settlement.go``
@1529fbc1 ``VerifyDevshardSettlement`` step by step: settler is the creator, version present (≤ 128 bytes) and
approved, nonce ≤ max_nonce, ``state_root`` = sha256(host_stats_hash ‖ fees ‖ rest_hash ‖ sha256(version) ‖
0x02), then every slot signature recovered over sha256 of ``DevshardStateSignatureContent{1 state_root,
2 escrow_id (decimal string), 3 nonce}`` (``recoverCosmosAddress``) to the slot's address or a warm key the caller
vouches for (on chain: an authz grant for ``/inference.inference.MsgStartInference``), one vote per slot, quorum
``2·n/3 + 1`` of the escrow's slots, per-slot missed/invalid bounds, and cost + fees ≤ the escrow amount.

What each host signs at settlement is therefore the settlement-phase root (phase byte 0x02) of the final state, its
escrow id as a decimal string and the settled nonce: the same ``StateSignatureContent`` hosts co-sign per nonce, so
the co-signatures of the last diff (whose state has drained into the Settlement phase) are the ones that settle.
Each signature's recovery byte is read as the chain reads it (it adds 27 and hands the byte to dcrd's compact
recovery: :func:`indexer.verify.signatures.recover_address_as_chain`), so a settlement the chain accepted with a
re-encoded recovery byte is not refused here.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable

from indexer.verify import proto as pb
from indexer.verify import signatures as sig
from indexer.verify import state_root as sr

MAX_VERSION_LENGTH = 128
U64 = (1 << 64) - 1


class SettlementError(ValueError):
    """A settlement the chain would refuse; the message is the chain's reason. ``unknown_signer``: as
    :class:`indexer.verify.apply_txs.ApplyError`'s (slot address, recovered key), for a slot signature by another
    key."""

    def __init__(self, message: str, unknown_signer: tuple[str, str] | None = None):
        super().__init__(message)
        self.unknown_signer = unknown_signer


@dataclass
class HostStatsEntry:
    slot_id: int = 0
    missed: int = 0
    invalid: int = 0
    cost: int = 0
    required_validations: int = 0
    completed_validations: int = 0
    unknown: list[tuple[int, int, int | bytes]] = field(default_factory=list)


@dataclass
class SlotSignature:
    slot_id: int = 0
    signature: bytes = b""
    unknown: list[tuple[int, int, int | bytes]] = field(default_factory=list)


@dataclass
class SettleMsg:
    settler: str = ""
    escrow_id: int = 0
    state_root: bytes = b""
    nonce: int = 0
    rest_hash: bytes = b""
    host_stats: list[HostStatsEntry] = field(default_factory=list)
    signatures: list[SlotSignature] = field(default_factory=list)
    fees: int = 0
    version: str = ""
    unknown: list[tuple[int, int, int | bytes]] = field(default_factory=list)


_HOST_FIELDS = {1: "slot_id", 2: "missed", 3: "invalid", 4: "cost", 5: "required_validations",
                6: "completed_validations"}
_MSG_SCALARS = {1: ("settler", pb.LEN), 2: ("escrow_id", pb.VARINT), 3: ("state_root", pb.LEN), 4: ("nonce", pb.VARINT),
                5: ("rest_hash", pb.LEN), 8: ("fees", pb.VARINT), 9: ("version", pb.LEN)}


def _expect(where: str, number: int, wire: int, want: int) -> None:
    if wire != want:
        raise pb.ProtoError(f"{where} field {number}: wire type {wire}, expected {want}")


def _text(where: str, value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise pb.ProtoError(f"{where}: not UTF-8") from None


def decode_host_stats(data: bytes) -> HostStatsEntry:
    out = HostStatsEntry()
    for number, wire, value in pb.fields(data):
        if number in _HOST_FIELDS:
            _expect("host_stats", number, wire, pb.VARINT)
            setattr(out, _HOST_FIELDS[number], value)
        else:
            out.unknown.append((number, wire, value))
    return out


def decode_slot_signature(data: bytes) -> SlotSignature:
    out = SlotSignature()
    for number, wire, value in pb.fields(data):
        if number == 1:
            _expect("signature", 1, wire, pb.VARINT)
            out.slot_id = value
        elif number == 2:
            _expect("signature", 2, wire, pb.LEN)
            out.signature = value
        else:
            out.unknown.append((number, wire, value))
    return out


def decode_settle_msg(data: bytes) -> SettleMsg:
    """Decode a serialized ``MsgSettleDevshardEscrow`` (:class:`indexer.verify.proto.ProtoError` when malformed)."""
    out = SettleMsg()
    for number, wire, value in pb.fields(data):
        if number in _MSG_SCALARS:
            name, want = _MSG_SCALARS[number]
            _expect("MsgSettleDevshardEscrow", number, wire, want)
            setattr(out, name, _text(name, value) if name in ("settler", "version") else value)
        elif number == 6:
            _expect("MsgSettleDevshardEscrow", 6, wire, pb.LEN)
            out.host_stats.append(decode_host_stats(value))
        elif number == 7:
            _expect("MsgSettleDevshardEscrow", 7, wire, pb.LEN)
            out.signatures.append(decode_slot_signature(value))
        else:
            out.unknown.append((number, wire, value))
    return out


def _unknown(items: list[tuple[int, int, int | bytes]]) -> bytes:
    return b"".join(pb.key(n, w) + (pb.uvarint(v) if w == pb.VARINT else pb.uvarint(len(v)) + v)
                    for n, w, v in items)


def encode_host_stats(h: HostStatsEntry) -> bytes:
    return b"".join(pb.f_uint(n, getattr(h, name)) for n, name in _HOST_FIELDS.items()) + _unknown(h.unknown)


def encode_settle_msg(m: SettleMsg) -> bytes:
    """Deterministic serialization (fields in number order, defaults left out, unknown fields last)."""
    return pb.concat((
        pb.f_str(1, m.settler), pb.f_uint(2, m.escrow_id), pb.f_bytes(3, m.state_root), pb.f_uint(4, m.nonce),
        pb.f_bytes(5, m.rest_hash), *(pb.f_msg(6, encode_host_stats(h)) for h in m.host_stats),
        *(pb.f_msg(7, pb.f_uint(1, s.slot_id) + pb.f_bytes(2, s.signature) + _unknown(s.unknown))
          for s in m.signatures),
        pb.f_uint(8, m.fees), pb.f_str(9, m.version), _unknown(m.unknown)))


def settlement_host_stats_hash(entries: list[HostStatsEntry]) -> bytes:
    """``ComputeDevshardHostStatsHash``: the devshard host-stats hash over the message's entries, sorted by slot."""
    stats = {}
    for h in entries:
        if h.slot_id in stats:
            raise SettlementError(f"duplicate host_stats slot_id {h.slot_id}")
        stats[h.slot_id] = sr.HostStats(h.missed, h.invalid, h.cost, h.required_validations, h.completed_validations)
    return sr.host_stats_hash(stats)


def settlement_root(m: SettleMsg) -> bytes:
    """The root the chain expects in ``state_root``: the settlement-phase root of the final state."""
    return sr.root_from_rest(settlement_host_stats_hash(m.host_stats), m.rest_hash, m.fees, sr.SETTLEMENT, m.version)


def assigned_upper_bound(latest_nonce: int, slot_count: int, slot_id: int) -> int:
    """``devshardAssignedUpperBoundForSlot``: most inferences slot ``slot_id`` can have executed by ``latest_nonce``
    (inference id == nonce, executor = id mod n, nonce 0 unused)."""
    if slot_count == 0:
        raise SettlementError("slot count cannot be zero")
    if slot_id >= slot_count:
        raise SettlementError(f"slot {slot_id} out of range for slot count {slot_count}")
    first = slot_id or slot_count
    return 0 if latest_nonce < first else 1 + (latest_nonce - first) // slot_count


@dataclass(frozen=True)
class Escrow:
    """What the chain knows of the escrow at settlement (``types.DevshardEscrow`` and the escrow params)."""
    escrow_id: int
    creator: str
    amount: int
    slots: tuple[str, ...]
    max_nonce: int
    approved_versions: tuple[str, ...] = ()  # empty = every version (the chain's permissive default)
    settled: bool = False


@dataclass(frozen=True)
class SettlementCheck:
    root: bytes
    votes: int
    quorum: int
    signers: dict[int, str]  # slot -> recovered address
    total_cost: int


def verify_settlement(m: SettleMsg, escrow: Escrow,
                      is_warm_key: Callable[[str, str], bool] | None = None) -> SettlementCheck:
    """Check ``m`` as ``VerifyDevshardSettlement`` does; :class:`SettlementError` with the chain's reason otherwise.
    ``is_warm_key(granter = slot address, grantee = recovered address)`` answers the authz question."""
    if escrow.settled:
        raise SettlementError(f"escrow {escrow.escrow_id} already settled")
    if m.settler != escrow.creator:
        raise SettlementError(f"settler {m.settler} is not the escrow creator {escrow.creator}")
    if not m.version:
        raise SettlementError("version is required")
    if m.nonce > escrow.max_nonce:
        raise SettlementError(f"nonce {m.nonce} exceeds maximum {escrow.max_nonce}")
    if len(m.version.encode("utf-8")) > MAX_VERSION_LENGTH:
        raise SettlementError(f"version exceeds maximum length of {MAX_VERSION_LENGTH}")
    if escrow.approved_versions and m.version not in escrow.approved_versions:
        raise SettlementError(f"settlement version {m.version!r} is not listed in approved_versions")
    if len(m.state_root) != 32:
        raise SettlementError(f"state_root must be 32 bytes, got {len(m.state_root)}")
    root = settlement_root(m)
    if root != m.state_root:
        raise SettlementError(f"state_root mismatch: message {m.state_root.hex()}, recomputed {root.hex()}")
    signed = sig.state_signature_bytes(state_root=m.state_root, escrow_id=escrow.escrow_id, nonce=m.nonce)
    signers: dict[int, str] = {}
    for s in m.signatures:
        if s.slot_id in signers:
            raise SettlementError(f"duplicate signature for slot {s.slot_id}")
        if s.slot_id >= len(escrow.slots):
            raise SettlementError(f"slot_id {s.slot_id} out of range")
        try:
            recovered = sig.recover_address_as_chain(signed, s.signature)
        except sig.SignatureError as exc:
            raise SettlementError(f"failed to recover address for slot {s.slot_id}: {exc}") from None
        expected = escrow.slots[s.slot_id]
        if recovered != expected and (is_warm_key is None or not is_warm_key(expected, recovered)):
            raise SettlementError(f"signature for slot {s.slot_id} recovered {recovered}, expected {expected}",
                                  (expected, recovered))
        signers[s.slot_id] = recovered
    quorum = 2 * len(escrow.slots) // 3 + 1
    if len(signers) < quorum:
        raise SettlementError(f"insufficient quorum: {len(signers)} slot votes, need {quorum}")
    total = 0
    for h in m.host_stats:
        assigned = assigned_upper_bound(m.nonce, len(escrow.slots), h.slot_id)
        if h.missed > assigned:
            raise SettlementError(f"slot {h.slot_id} missed count {h.missed} exceeds assigned per slot {assigned}")
        if h.invalid > assigned - h.missed:
            raise SettlementError(f"slot {h.slot_id} invalid count {h.invalid} exceeds completed per slot "
                                  f"{assigned - h.missed}")
        total += h.cost
        if total > U64:
            raise SettlementError("total cost overflow")
    if total + m.fees > U64:
        raise SettlementError("total cost plus fees overflow")
    if total + m.fees > escrow.amount:
        raise SettlementError(f"total debit {total + m.fees} (cost {total} + fees {m.fees}) exceeds escrow amount "
                              f"{escrow.amount}")
    return SettlementCheck(root, len(signers), quorum, signers, total)


def sign_state(private_key, state_root: bytes, escrow_id: int | str, nonce: int) -> bytes:
    """A host's 65-byte co-signature of a state (what the chain recovers at settlement); ``private_key`` is a
    ``coincurve.PrivateKey``. Used by tests and the devnet, never with a real host key."""
    return private_key.sign_recoverable(sig.state_signature_bytes(state_root=state_root, escrow_id=escrow_id,
                                                                  nonce=nonce),
                                        hasher=lambda b: hashlib.sha256(b).digest())


SETTLE_TYPE_URL = "/inference.inference.MsgSettleDevshardEscrow"


def tx_hash(tx_raw: bytes) -> str:
    """The chain's transaction hash: upper-case hex of sha256 over the broadcast ``TxRaw`` bytes."""
    return hashlib.sha256(tx_raw).hexdigest().upper()


def settle_msgs_in_tx(tx_raw: bytes) -> list[bytes]:
    """The ``MsgSettleDevshardEscrow`` bytes a broadcast transaction carries, exactly as signed. Layout (cosmos-sdk
    ``proto/cosmos/tx/v1beta1/tx.proto``): ``TxRaw{1 body_bytes, 2 auth_info_bytes, 3 signatures}``,
    ``TxBody{1 messages (google.protobuf.Any{1 type_url, 2 value}), …}``; the type URL is the one the devshard
    gateway broadcasts (qdanik/gonka @8a338499 ``devshard/cmd/gateway/chain``, ``settleEscrowMsgTypeURL``)."""
    bodies = [v for n, w, v in pb.fields(tx_raw) if n == 1 and w == pb.LEN]
    if len(bodies) != 1:
        raise pb.ProtoError(f"TxRaw: expected one body_bytes field, found {len(bodies)}")
    out = []
    for number, wire, value in pb.fields(bodies[0]):
        if number != 1:
            continue  # memo, timeout height, extension options: not part of the settlement
        _expect("TxBody", 1, wire, pb.LEN)
        parts = {n: v for n, w, v in pb.fields(value) if w == pb.LEN}
        if parts.get(1, b"").decode("utf-8", "replace") == SETTLE_TYPE_URL:
            out.append(parts.get(2, b""))
    return out

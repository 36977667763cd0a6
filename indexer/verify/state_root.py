"""The devshard ``post_state_root``: the hash a user signs in every diff and hosts co-sign, recomputed from state.

Ported from gonka-ai/gonka ``devshard/state/hash.go`` (@01dfd416 for v1–v4.1, @c6c474aa for v5: ``ComputeStateRoot``,
``ComputeStateRootFromRestHash``, ``ComputeRestHashV2``, ``ComputeInferencesHashV2``, ``FoldSealedAccumulator``,
``computeWarmKeysHash``, ``computeHostStatsHash``, ``marshalInferenceEntry``) and ``devshard/state/seal.go`` @bb34d444
(``computeStateRootLocked``)::

    root      = sha256(host_stats_hash ‖ fees u64be ‖ rest_hash ‖ sha256(version) ‖ phase byte)
    rest_hash = sha256(balance u64be ‖ inferences ‖ warm_keys_hash [‖ height_sync_hash, v5])
    inferences = sha256(sealed_acc ‖ live_hash)            v2 … v5 (sealed-accumulator composition)
               = live_hash                                  v1 (before the accumulator)

The version tag is a link-time stamp of the devshard binary (``devshard/types/protocol_version.go`` @836162fc) and the
composition is a compile-time choice of that binary (``devshard/state/composition.go`` @01dfd416:
``useV2StateRootComposition = false`` while the default tag was ``v2``), so the tag alone does not prove the
composition. Which composition each tag has is :func:`indexer.verify.versions.composition` (only what is established;
any other tag is refused with :class:`UnsupportedVersion` unless the caller names the composition to try,
``State.composition``, e.g. to find which one reproduces a signed root).
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

from indexer.verify import proto as pb
from indexer.verify.versions import UnsupportedVersion, composition

# Phase byte (devshard/types SessionPhase): the chain recomputes settlement roots with SETTLEMENT.
ACTIVE, FINALIZING, SETTLEMENT = 0, 1, 2
# InferenceStatus (devshard/types, iota order)
PENDING, STARTED, FINISHED, CHALLENGED, VALIDATED, INVALIDATED, TIMED_OUT = range(7)

U64 = (1 << 64) - 1
ZERO32 = bytes(32)


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _u64(value: int, what: str) -> bytes:
    if not 0 <= value <= U64:
        raise ValueError(f"{what} {value} does not fit in uint64")
    return struct.pack(">Q", value)


def _counted_setattr(self, name: str, value) -> None:
    """Every write counts in ``_writes`` (not a field): a root cache keeps an object's encoding under the object and
    this count, so an unchanged one is not encoded again and one changed in place, by anyone, always is."""
    d = self.__dict__
    d[name] = value
    d["_writes"] = d.get("_writes", 0) + 1


@dataclass
class HostStats:
    missed: int = 0
    invalid: int = 0
    cost: int = 0
    required_validations: int = 0
    completed_validations: int = 0

    __setattr__ = _counted_setattr


@dataclass
class Record:
    """One inference as the state root commits it (``InferenceRecordProto`` fields, state.proto @32dead7a)."""
    status: int
    executor_slot: int
    model: str = ""
    prompt_hash: bytes = b""
    response_hash: bytes = b""
    input_length: int = 0
    max_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reserved_cost: int = 0
    actual_cost: int = 0
    started_at: int = 0
    confirmed_at: int = 0
    votes_valid: int = 0
    votes_invalid: int = 0
    validated_by: int = 0  # 128-bit slot bitmap, bit i = slot i
    started_at_height: int = 0  # v5: the start's block-height stamp (0 = none)
    confirmed_at_height: int = 0  # v5: the confirm's block-height stamp (0 = none)

    __setattr__ = _counted_setattr  # (:func:`live_hash` keeps each entry under the record and its write count)


@dataclass(frozen=True)
class HeightSyncCommit:
    """v5 ``HeightSyncEscrowCommit``; all zero while height sync is idle."""
    forced_start: int = 0
    forced_end: int = 0
    cadence_swallow_until: int = 0
    swallow_fe: int = 0
    turn_k: int = 0
    turn_slots: int = 0
    reason: str = ""


@dataclass
class State:
    """The parts of an escrow's session state that enter its root."""
    version: str
    balance: int
    fees: int = 0
    phase: int = ACTIVE
    host_stats: dict[int, HostStats] = field(default_factory=dict)
    live: dict[int, Record] = field(default_factory=dict)
    sealed_acc: bytes = ZERO32
    warm_keys: dict[int, str] = field(default_factory=dict)
    height_sync: HeightSyncCommit = field(default_factory=HeightSyncCommit)
    composition: tuple[bool, bool] | None = None  # (accumulator wrapper, height-sync term); None = by version
    record_height_fields: tuple[int, int] | None = None  # proto numbers of the v5 record heights, when established
    # id -> (the record's field values, its framed entry bytes): each live record is encoded again only once changed
    entry_cache: dict = field(default_factory=dict, compare=False, repr=False)
    stats_cache: dict = field(default_factory=dict, compare=False, repr=False)  # slot -> (stats, writes, entry)
    warm_cache: tuple | None = field(default=None, compare=False, repr=False)  # (warm keys, their hash)


def record_entry(inference_id: int, r: Record, height_fields: tuple[int, int] | None = None) -> bytes:
    """Deterministic ``InferenceRecordProto`` bytes (``marshalInferenceEntry``). ``validated_by`` is always the 16-byte
    little-endian bitmap (``Bitmap128.Bytes``), so field 17 is always present. The v5 height fields are left out while
    zero (proto3 omits them, whatever their numbers); a non-zero one needs ``height_fields`` (started, confirmed)."""
    if not 0 <= r.validated_by < 1 << 128:
        raise ValueError(f"inference {inference_id}: validated_by bitmap wider than 128 bits")
    u, b = pb.f_uint, pb.f_bytes
    fields = (u(1, inference_id), u(2, r.status), u(3, r.executor_slot), pb.f_str(4, r.model), b(5, r.prompt_hash),
              b(6, r.response_hash), u(7, r.input_length), u(8, r.max_tokens), u(9, r.input_tokens),
              u(10, r.output_tokens), u(11, r.reserved_cost), u(12, r.actual_cost), u(13, r.started_at),
              u(14, r.confirmed_at), u(15, r.votes_valid), u(16, r.votes_invalid),
              b(17, r.validated_by.to_bytes(16, "little")))  # field i + 1 at index i
    if not (r.started_at_height or r.confirmed_at_height):
        return b"".join(fields)
    if height_fields is None:
        raise UnsupportedVersion(
            f"inference {inference_id} carries a block-height stamp (started_at_height {r.started_at_height}, "
            f"confirmed_at_height {r.confirmed_at_height}): the InferenceRecordProto numbers of those fields are in "
            f"no stored upstream state.proto (hash.go @c6c474aa marshals them), so its root is not computed")
    started, confirmed = height_fields
    numbered = [*enumerate(fields, start=1), (started, u(started, r.started_at_height)),
                (confirmed, u(confirmed, r.confirmed_at_height))]
    numbered.sort(key=lambda f: f[0])
    return b"".join(part for _, part in numbered)


def _stats_hash(s: State) -> bytes:
    """:func:`host_stats_hash` of ``s``, each slot's entry encoded again only when its stats changed (a diff changes
    one or two slots' stats, if any)."""
    cache, parts = s.stats_cache, []
    for slot in sorted(s.host_stats):
        stats = s.host_stats[slot]
        writes = stats.__dict__.get("_writes")
        hit = cache.get(slot)
        if hit is None or hit[0] is not stats or hit[1] != writes:
            hit = cache[slot] = (stats, writes, _stats_entry(slot, stats))
        parts.append(hit[2])
    return sha256(b"".join(parts))


def _stats_entry(slot: int, s: HostStats) -> bytes:
    return pb.f_msg(1, pb.concat((
        pb.f_uint(1, slot), pb.f_uint(2, s.missed), pb.f_uint(3, s.invalid), pb.f_uint(4, s.cost),
        pb.f_uint(5, s.required_validations), pb.f_uint(6, s.completed_validations))))


def host_stats_hash(stats: dict[int, HostStats]) -> bytes:
    """sha256 of ``HostStatsMapProto{entries sorted by slot}``, fields 1–6 (model stats are not committed)."""
    return sha256(b"".join(_stats_entry(slot, s) for slot, s in sorted(stats.items())))


def live_hash(live: dict[int, Record], height_fields: tuple[int, int] | None = None,
              cache: dict | None = None) -> bytes:
    """``computeInferencesHashFromEntries``: each entry as a length-delimited field 1, ids ascending. ``cache`` keeps
    each record's framed entry under the record object and its write count (:meth:`Record.__setattr__`), so an
    unchanged record is not encoded again and one changed in place, by anyone, is never served stale; checking
    that costs no encoding, which matters with hundreds of live records at every nonce."""
    if cache is None:
        return sha256(b"".join(pb.f_msg(1, record_entry(i, live[i], height_fields)) for i in sorted(live)))
    parts = []
    for i in sorted(live):
        rec = live[i]
        writes = rec.__dict__.get("_writes")
        hit = cache.get(i)
        if hit is None or hit[0] is not rec or hit[1] != writes or hit[2] != height_fields:
            hit = cache[i] = (rec, writes, height_fields, pb.f_msg(1, record_entry(i, rec, height_fields)))
        parts.append(hit[3])
    if len(cache) > 2 * len(live) + 64:  # drop the sealed ones
        for i in [i for i in cache if i not in live]:
            del cache[i]
    return sha256(b"".join(parts))


def warm_keys_hash(warm: dict[int, str]) -> bytes:
    out = bytearray()
    for slot in sorted(warm):
        addr = warm[slot].encode("utf-8")
        out += struct.pack(">II", slot, len(addr)) + addr
    return sha256(bytes(out))


def height_sync_hash(h: HeightSyncCommit) -> bytes:
    reason = h.reason.encode("utf-8")
    return sha256(b"".join(_u64(v, "height sync field") for v in (
        h.forced_start, h.forced_end, h.cadence_swallow_until, h.swallow_fe, h.turn_k, h.turn_slots))
        + struct.pack(">I", len(reason)) + reason)


def fold_sealed(acc: bytes, seal_nonce: int, inference_id: int, entry: bytes) -> bytes:
    """``FoldSealedAccumulator``: acc' = sha256(acc ‖ seal_nonce u64be ‖ inference_id u64be ‖ entry)."""
    return sha256(acc + _u64(seal_nonce, "seal nonce") + _u64(inference_id, "inference id") + entry)


def rest_hash(s: State) -> bytes:
    wrapped, height_term = s.composition or composition(s.version)
    inferences = live_hash(s.live, s.record_height_fields, s.entry_cache)
    if wrapped:
        inferences = sha256(s.sealed_acc + inferences)
    elif s.sealed_acc != ZERO32:
        raise UnsupportedVersion(f"{s.version}: a sealed accumulator exists only with the v2 composition")
    tail = height_sync_hash(s.height_sync) if height_term else b""
    if not height_term and s.height_sync != HeightSyncCommit():
        raise UnsupportedVersion(f"{s.version}: height sync exists only from v5")
    warm = tuple(sorted(s.warm_keys.items()))  # bound once per slot, then fixed: hashed again only when one binds
    if s.warm_cache is None or s.warm_cache[0] != warm:
        s.warm_cache = (warm, warm_keys_hash(s.warm_keys))
    return sha256(_u64(s.balance, "balance") + inferences + s.warm_cache[1] + tail)


def root_from_rest(host_hash: bytes, rest: bytes, fees: int, phase: int, version: str) -> bytes:
    """``ComputeStateRootFromRestHash``: also what the chain computes at settlement (phase :data:`SETTLEMENT`)."""
    if phase not in (ACTIVE, FINALIZING, SETTLEMENT):
        raise ValueError(f"phase {phase} is not 0, 1 or 2")
    return sha256(host_hash + _u64(fees, "fees") + rest + sha256(version.encode("utf-8")) + bytes([phase]))


def state_root(s: State) -> bytes:
    return root_from_rest(_stats_hash(s), rest_hash(s), s.fees, s.phase, s.version)

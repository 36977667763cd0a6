"""Map decoded devshard diffs and chain/host JSON onto the normalized records of interface.md §2.

Conventions (interface.md §2): ``kind`` first, ``escrow_id`` a string, hashes lowercase hex, u64 as
Python ints (never floats), decimals as :class:`decimal.Decimal`. Tx records additionally carry
``diff_nonce``, ``tx_index`` (position inside the diff; with ``diff_nonce`` it orders replay) and
``protocol_version`` (the proto the diff was decoded with). Txs that the indexer does not model
(finalize_round, heartbeat, …, unknown oneof members) become counts, not records.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from collections.abc import Iterable, Mapping  # not typing's: its isinstance costs ~1.5 µs a tx
from typing import Any

import orjson
from google.protobuf.unknown_fields import UnknownFieldSet

from indexer.records import ADDRESS_LEN, ARG_LEN, ARGS, MAX_SLOTS, NAME_LEN
from indexer.wire.protobuf import UNKNOWN_KEY
from indexer.wire.errors import NormalizeError, bounded
from indexer.wire.schemas import schema_for


TIMEOUT_REASONS = {1: "refused", 2: "execution"}  # TimeoutReason numbers -> the record's reason word


@dataclass
class DiffRecords:
    records: list[dict[str, Any]] = field(default_factory=list)
    other: Counter = field(default_factory=Counter)  # tx name -> count of skipped txs


# --------------------------------------------------------------------------- diffs


class _Fields:
    """Attribute access to a decoded dict, so one set of record builders reads dicts and message objects alike
    (the poller's txs are protobuf objects read directly; dicts come from the devnet, tests and tools)."""

    __slots__ = ("_d",)

    def __init__(self, d: Mapping[str, Any]) -> None:
        self._d = d

    def __getattr__(self, name: str) -> Any:
        try:
            value = self._d[name]
        except KeyError:
            raise AttributeError(name) from None
        if isinstance(value, Mapping):
            return _Fields(value)
        if isinstance(value, list) and value and isinstance(value[0], Mapping):
            return [_Fields(v) for v in value]
        return value


def _votes(votes: Iterable[Any]) -> list[dict[str, Any]]:
    return [{"voter_slot": v.voter_slot, "accept": v.accept} for v in votes]


def _start(m: Any) -> dict[str, Any]:
    return {
        "prompt_hash": m.prompt_hash.hex(),
        "model": m.model,
        "input_length": m.input_length,
        "max_tokens": m.max_tokens,
        "started_at": m.started_at,
    }


def _finish(m: Any) -> dict[str, Any]:
    out = {
        "executor_slot": m.executor_slot,
        "input_tokens": m.input_tokens,
        "output_tokens": m.output_tokens,
        "response_hash": m.response_hash.hex(),
    }
    served = getattr(m, "served_hash", b"")  # newer protos only; the error-miss verifier accepts either hash
    if served:
        out["served_hash"] = served.hex()
    return out


# oneof member -> (record kind, key-field builder); the key fields come right after escrow/inference id
_TX_KINDS = {
    "start_inference": ("start", _start),
    "confirm_start": ("confirm_start", lambda m: {"confirmed_at": m.confirmed_at}),
    "finish_inference": ("finish", _finish),
    "validation": ("validation", lambda m: {"validator_slot": m.validator_slot, "valid": m.valid}),
    "validation_vote": ("validation_vote", lambda m: {"voter_slot": m.voter_slot, "vote_valid": m.vote_valid}),
    "error_miss": ("error_miss", lambda m: {"votes": _votes(m.votes)}),
}
_SLOT_KEYS = {"validation": "validator_slot", "validation_vote": "voter_slot"}


def _member(tx: Any) -> tuple[str, Any]:
    """(oneof member name, its message) of a DevshardTx dict or object; ``unknown:N`` / ``empty`` with None."""
    if type(tx) is dict or isinstance(tx, Mapping):  # the exact-type test first: an ABC check costs a lot per tx
        names = [k for k in tx if k != UNKNOWN_KEY]
        if names:
            return names[0], _Fields(tx[names[0]])
        unknown = [item[0] for item in tx.get(UNKNOWN_KEY) or []]
    else:
        name = tx.WhichOneof("tx")
        if name is not None:
            return name, getattr(tx, name)
        unknown = [item.field_number for item in UnknownFieldSet(tx)]
    return (f"unknown:{unknown[0]}" if unknown else "empty"), None


def tx_record(
    escrow_id: str, diff_nonce: int, tx_index: int, tx: Any, protocol_version: str
) -> tuple[dict[str, Any] | None, str]:
    """One DevshardTx (decoded dict or message object) → (record or None, tx name). None: "count it as other"."""
    name, msg = _member(tx)
    if msg is None:
        return None, name
    if name == "timeout_inference":
        reason = TIMEOUT_REASONS.get(msg.reason)
        if reason is None:  # UNSPECIFIED, or the old TIMEOUT_REASON_ERROR of v3–v4.1
            names = schema_for(protocol_version).enums["TimeoutReason"]
            label = names.get(msg.reason, f"TIMEOUT_REASON_{msg.reason}")
            return None, f"timeout_inference:{label}"
        kind, body = "timeout", {"reason": reason, "votes": _votes(msg.votes)}
    elif name in _TX_KINDS:
        kind, build = _TX_KINDS[name]
        body = build(msg)
    else:
        return None, name
    rec: dict[str, Any] = {"kind": kind, "escrow_id": escrow_id, "inference_id": msg.inference_id}
    slot_key = _SLOT_KEYS.get(kind)
    if slot_key is not None:
        rec[slot_key] = body.pop(slot_key)
    rec["diff_nonce"] = diff_nonce
    rec["tx_index"] = tx_index
    rec["protocol_version"] = protocol_version
    rec.update(body)
    return rec, name


def normalize_diffs(
    escrow_id: str | int,
    diffs: Iterable[Mapping[str, Any]],
    protocol_version: str,
    payloads: Mapping[int, str] | None = None,
) -> DiffRecords:
    """Decoded diffs of one escrow (any order; txs as dicts or DevshardTx objects) → records in (nonce, tx_index)
    order.

    ``payloads`` maps inference_id → stored response body; when given, the finish record of that
    inference gets ``response_payload``.
    """
    escrow_id = str(escrow_id)
    out = DiffRecords()
    for diff in sorted(diffs, key=lambda d: d["nonce"]):
        check_diff_escrow(escrow_id, diff["nonce"], diff.get("escrow_id"))
        for index, tx in enumerate(diff.get("txs") or []):
            rec, name = tx_record(escrow_id, diff["nonce"], index, tx, protocol_version)
            if rec is None:
                out.other[name] += 1
                continue
            if rec["kind"] == "finish" and payloads and rec["inference_id"] in payloads:
                rec["response_payload"] = payloads[rec["inference_id"]]
            out.records.append(rec)
    return out


def check_diff_escrow(escrow_id: str, nonce: int, owner: Any) -> None:
    """A diff that names an escrow (DiffContent.escrow_id, or the entry's) must name the one whose log it is in."""
    if owner and str(owner) != escrow_id:
        raise NormalizeError(f"diff {nonce} belongs to escrow {owner}, not {escrow_id}")


# --------------------------------------------------------------------------- scalar parsing


def parse_u64(value: Any, what: str = "value") -> int:
    """Chain REST u64 (decimal string) or Go JSON number → int. Floats, bools and digits other than ASCII 0-9 (which
    ``str.isdigit`` also takes: "²" would crash ``int``, "１２" read as 12) are refused."""
    if isinstance(value, bool) or isinstance(value, float):
        raise NormalizeError(f"{what}: expected an integer, got {type(value).__name__}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        n = int(value.strip())
    else:
        raise NormalizeError(f"{what}: expected an unsigned integer, got {value!r}")
    if not 0 <= n < 1 << 64:
        raise NormalizeError(f"{what}: {n} out of u64 range")
    return n


def parse_i64(value: Any, what: str = "value") -> int:
    """Chain REST int64 (decimal string, maybe signed) or Go JSON number → int. Floats and bools are refused."""
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not (text.isascii() and text.removeprefix("-").isdigit() and -(1 << 63) <= int(text) < 1 << 63):
        raise NormalizeError(f"{what}: expected an int64, got {value!r}")
    return int(text)


def parse_decimal(value: Any, what: str = "decimal") -> Decimal:
    """``{"value":"97","exponent":-2}`` → Decimal('0.97'); a plain decimal string is accepted too."""
    try:
        if isinstance(value, Mapping):
            exponent = value.get("exponent", 0)
            if isinstance(exponent, bool) or not isinstance(exponent, (int, str)):
                raise NormalizeError(f"{what}: bad exponent {exponent!r}")
            return Decimal(str(value["value"])).scaleb(int(exponent))
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return Decimal(str(value))
    except (KeyError, InvalidOperation, ValueError):
        pass
    raise NormalizeError(f"{what}: not a decimal: {value!r}")


def _opt_u64(obj: Mapping[str, Any], key: str) -> int | None:
    return parse_u64(obj[key], key) if obj.get(key) not in (None, "") else None


def _unwrap(data: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """Accept the whole response or its inner object; ``found: false`` means absent (pruned)."""
    if not isinstance(data, Mapping):
        raise NormalizeError(f"expected a JSON object, got {type(data).__name__}")
    if data.get("found") is False:
        return None
    inner = data.get(key, data)
    if not isinstance(inner, Mapping):
        raise NormalizeError(f"{key}: expected an object")
    return inner


# --------------------------------------------------------------------------- chain REST / host JSON


def current_epoch(data: Mapping[str, Any]) -> int:
    """``get_current_epoch`` (``{"epoch":"408"}``) or ``epoch_info`` (``latest_epoch.index``)."""
    if "epoch" in data:
        return parse_u64(data["epoch"], "epoch")
    return parse_u64(data["latest_epoch"]["index"], "latest_epoch.index")


def epoch_record(data: Mapping[str, Any], observed_at: str | None = None) -> dict[str, Any]:
    """``epoch_info`` → ``epoch`` record (start height = the epoch's PoC start block)."""
    latest = data.get("latest_epoch") or {}
    rec: dict[str, Any] = {"kind": "epoch", "epoch_index": parse_u64(latest.get("index"), "latest_epoch.index")}
    if latest.get("poc_start_block_height") not in (None, ""):
        rec["start_height"] = parse_u64(latest["poc_start_block_height"], "poc_start_block_height")
    if observed_at:
        rec["observed_at"] = observed_at
    return rec


def model_snapshot_record(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """F1 ``epoch_group_data`` of a model sub-group → ``model_snapshot``; the root group → None."""
    group = _unwrap(data, "epoch_group_data")
    if group is None:
        return None
    snap = group.get("model_snapshot") or {}
    model_id = group.get("model_id") or snap.get("id") or ""
    if not model_id:
        return None  # root group: lists sub_group_models, carries no snapshot of its own
    args = snap.get("model_args") or []
    if not all(isinstance(a, str) for a in args):
        raise NormalizeError("model_args: expected strings")
    rec: dict[str, Any] = {
        "kind": "model_snapshot",
        "epoch_index": parse_u64(group.get("epoch_index"), "epoch_index"),
        "model_id": bounded(str(model_id), "model_id", NAME_LEN),
        "model_args": bounded(list(args), "model_args", ARG_LEN, ARGS),
    }
    if snap.get("validation_threshold") is not None:
        rec["validation_threshold"] = parse_decimal(snap["validation_threshold"], "validation_threshold")
    return rec


_ZERO_IS_UNSET = frozenset({"validation_rate", "max_model_len"})
# The session config an escrow was created with, which every state root depends on (indexer.verify.inputs): as the
# chain publishes it, 0 included (the session rules refuse a 0 they cannot use, saying why); absent = not captured.
# DevshardEscrow fields 8, 10-12, 14, 15 (inference-chain/proto/inference/inference/devshard_escrow.proto @056f1980);
# the seal and auto-seal fields of later builds by their JSON names (DevshardEscrowParams' default_* values).
_SESSION_CONFIG = ("token_price", "create_devshard_fee", "fee_per_nonce", "inference_seal_grace_nonces",
                   "inference_seal_grace_seconds", "auto_seal_every_n_nonces", "max_nonce")
_SESSION_TIMES = ("refusal_timeout", "execution_timeout")  # int64 seconds


def escrow_record(data: Mapping[str, Any], protocol_version: str | None = None) -> dict[str, Any] | None:
    """F3 ``devshard_escrow`` → ``escrow`` record; ``found:false`` (pruned/unknown) → None.

    Decoded by field name (numbers drift between chain versions). ``max_model_len`` (PR #1763) may be
    a string or a number; 0 means unknown and is left out, as is a ``validation_rate`` of 0 (the default applies).
    """
    esc = _unwrap(data, "escrow")
    if esc is None:
        return None
    slots = esc.get("slots") or []
    if not all(isinstance(s, str) for s in slots):
        raise NormalizeError("slots: expected address strings")
    rec: dict[str, Any] = {
        "kind": "escrow",
        "escrow_id": str(parse_u64(esc.get("id"), "id")),
        "epoch_index": parse_u64(esc.get("epoch_index"), "epoch_index"),
        "model_id": bounded(esc.get("model_id") or "", "model_id", NAME_LEN),
        "slots": bounded(list(slots), "slots", ADDRESS_LEN, MAX_SLOTS),
        # 0 / absent means "compiled default" (floor(group/2)); the replay applies that rule
        "vote_threshold_factor": _opt_u64(esc, "vote_threshold_factor") or 0,
    }
    creator = esc.get("creator")
    if creator not in (None, "") and not isinstance(creator, str):
        raise NormalizeError(f"creator: expected an address string, got {type(creator).__name__}")
    if creator:
        # who signs every diff (the user): the signed check recovers to it
        rec["creator"] = bounded(creator, "creator", ADDRESS_LEN)
    for key in ("validation_rate", "max_model_len", "amount", *_SESSION_CONFIG):
        value = _opt_u64(esc, key)
        # 0 is proto3's unset: "zero values fall back to compiled defaults" (devshard_escrow.proto), not a rate of 0
        if value is not None and not (key in _ZERO_IS_UNSET and value == 0):
            rec[key] = value
    for key in _SESSION_TIMES:
        if esc.get(key) not in (None, ""):
            rec[key] = parse_i64(esc[key], key)
    if protocol_version:
        rec["protocol_version"] = protocol_version
    if isinstance(esc.get("settled"), bool):
        rec["settled"] = esc["settled"]
    return rec


_STAT_FIELDS = ("missed", "invalid", "cost", "required_validations", "completed_validations")
_NEWER_STAT_FIELDS = ("validated", "finished")  # newer settlement stats (uint32), kept when a build sends them


def host_epoch_stats_record(data: Mapping[str, Any], epoch: int | None = None,
                            participant: str | None = None) -> dict[str, Any] | None:
    """F10 ``devshard_host_epoch_stats/{epoch}/{participant}`` → ``host_epoch_stats``; found:false → None. The chain
    stores each entry with its participant and epoch (gonka-ai/gonka x/inference/keeper/devshard_host_stats.go @
    23d3a46e), so one naming none, or not the ``participant`` / ``epoch`` asked, is refused (stored, it would count
    one host's misses against another)."""
    st = _unwrap(data, "stats")
    if st is None:
        return None
    got_epoch, got = parse_u64(st.get("epoch_index"), "epoch_index"), st.get("participant")
    if not isinstance(got, str) or not got or participant not in (None, got) or epoch not in (None, got_epoch):
        raise NormalizeError(f"devshard_host_epoch_stats/{epoch}/{participant}: answered for participant "
                             f"{str(got)[:ADDRESS_LEN]!r}, epoch {got_epoch}")
    rec: dict[str, Any] = {
        "kind": "host_epoch_stats",
        "epoch_index": got_epoch,
        "participant": bounded(got, "participant", ADDRESS_LEN),
    }
    for key in (*_STAT_FIELDS, "escrow_count"):
        rec[key] = parse_u64(st.get(key, 0), key)  # proto3 JSON may omit zero counters
    _newer_stats(rec, st)
    return rec


def _newer_stats(rec: dict[str, Any], stats: Mapping[str, Any]) -> None:
    for key in _NEWER_STAT_FIELDS:
        if key in stats:
            rec[key] = parse_u64(stats[key], key)


def host_stats_records(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """F11 host shard detail (Go JSON, string slot keys) → one ``host_stats`` record per slot."""
    if not isinstance(data, Mapping) or not isinstance(data.get("host_stats"), Mapping):
        raise NormalizeError("shard detail: expected a 'host_stats' object")
    escrow_id = str(parse_u64(data.get("escrow_id"), "escrow_id"))
    out = []
    for slot_key, st in data["host_stats"].items():
        rec: dict[str, Any] = {"kind": "host_stats", "escrow_id": escrow_id, "slot_id": parse_u64(slot_key, "slot")}
        for key in _STAT_FIELDS:
            rec[key] = parse_u64(st.get(key, 0), key)
        _newer_stats(rec, st)
        out.append(rec)
    return sorted(out, key=lambda r: r["slot_id"])


def participant_inference_url(data: Mapping[str, Any]) -> str:
    """``participant/{addr}`` → its ``inference_url`` (where its devshard host answers)."""
    p = _unwrap(data, "participant") or {}
    url = p.get("inference_url") or ""
    if not isinstance(url, str) or not url:
        raise NormalizeError("participant has no inference_url")
    return url.rstrip("/")


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def dumps_record(record: Mapping[str, Any]) -> str:
    """One NDJSON line; Decimal → string (exact), bytes → hex."""
    return json.dumps(record, separators=(",", ":"), default=_json_default, ensure_ascii=False)


def dumps_record_bytes(record: Mapping[str, Any]) -> bytes:
    """:func:`dumps_record` as UTF-8 bytes, through orjson (several times faster; the same text for records of
    str keys, ints, strs, bools, None, lists, dicts, bytes and Decimals). Anything orjson refuses (an int
    beyond 64 bits, an unpaired surrogate) goes through :func:`dumps_record`."""
    try:
        return orjson.dumps(record, default=_json_default)
    except (TypeError, orjson.JSONEncodeError):
        return dumps_record(record).encode()

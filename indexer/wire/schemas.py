"""Devshard message tables, one per released protocol version, named as the chain names it.

The names are those of ``DevshardEscrowParams.approved_versions`` (mainnet approved ``v3``, ``v4``, ``v4.1``, ``v5``).
Each table was checked against the gonka-ai/gonka protos named in :data:`SOURCES` (``devshard/proto/devshard/v1/
diff.proto`` and ``tx.proto``); docs/protocol-versions.md repeats the table. What the stored history shows:

=========================  ==========================================================================================
v3, v4, v4.1               DiffContent 1–5 (``sealed_inference_ids`` = 5); DevshardTx oneof 1–8; TimeoutReason 3 =
                           ``TIMEOUT_REASON_ERROR`` (the pre-error-miss way to report an error body); MsgStartInference
                           1–8; MsgFinishInference 1–9. No proto change between v4 and v4.1 was found.
v5                         + DevshardTx 9 ``force_height_sync_turn``, 10 ``heartbeat``, 11 ``height_ack`` (height sync),
                           12/13 reserved (cPoC); + ``error_miss`` → MsgErrorMiss; TimeoutReason 3 reserved;
                           + ``MsgStartInference.protocol_version`` (9), ``MsgFinishInference.served_hash`` (10).
=========================  ==========================================================================================

``error_miss`` = 14 is the number of the error-finish-miss design (``devshard/docs/proposals/error-finish-miss.md``:
"12/13 reserved for cPoC"); none of the stored diff.proto versions shows the member, while the host's state machine
dispatches ``DevshardTx_ErrorMiss`` to ``applyErrorMiss``. A different released number would decode as an unknown
member (counted as ``unknown:N``, kept byte for byte), never as another message.

A field a version does not know is not lost: the parser keeps it as an unknown field. Messages the indexer ignores
(reveal_seed, finalize_round, heartbeat, …) are declared empty, so their whole content is kept as unknown fields.
Versions compare numerically by component (:func:`version_key`); a version without a table is an error
(:class:`UnknownProtocolVersion`), never a decode with another table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from indexer.wire.errors import WireDecodeError
from indexer.wire.protobuf import Schema
from indexer.wire.tables import Field, MessageType


class UnknownProtocolVersion(WireDecodeError):
    """A protocol version with no wire table: its diffs cannot be decoded (raised, never guessed). A
    :class:`WireDecodeError`, so the poller records it against the escrow like any undecodable log."""

    def __init__(self, version: str | None, escrow: str | None = None, host: str | None = None) -> None:
        self.version, self.escrow, self.host = version, escrow, host
        super().__init__(f"unknown devshard protocol version {version!r} (escrow {escrow or '?'}, host {host or '?'}); "
                         f"known: {', '.join(VERSIONS)}")


_VERSION = re.compile(r"[vV]?(\d+(?:\.\d+)*)")


def version_key(name: str) -> tuple[int, tuple[int, ...], str]:
    """Sort key of a protocol version name: numeric by dotted component (``v4`` < ``v4.1`` < ``v5`` < ``v10``).

    Names without a leading number (``dev``) sort below every numbered one, among themselves by text; a suffix after
    the numbers (``v5-r2``) only breaks ties."""
    text = (name or "").strip()
    m = _VERSION.match(text)
    if m is None:
        return (0, (), text)
    return (1, tuple(int(p) for p in m.group(1).split(".")), text)


def newest(names: Iterable[str]) -> str | None:
    """The newest of ``names`` by :func:`version_key`; None when there is none."""
    return max(names, key=version_key, default=None)


_REPO = "gonka-ai/gonka"
_DIFF = "devshard/proto/devshard/v1/diff.proto"
_TX = "devshard/proto/devshard/v1/tx.proto"
_PRE_V5 = f"{_REPO} {_DIFF}@250ebdb3ea67ff6d0f2fa38db2d01c9710433eb0, {_TX}@c1ea69b738b203d8aa1ef96ad9be49cc476a6e88"
_V5 = (f"{_REPO} {_DIFF}@27fd7d3d3ba8f6bc6441ca282d4068eaa80921f1 (height-sync oneof 9–11, reserved 12/13), "
       f"{_TX}@1074652b291d360025452ff0b756bcf56f58c229 (MsgErrorMiss, reserved 3, fields 9/10), "
       f"error_miss = 14 from devshard/docs/proposals/error-finish-miss.md@325631c172e221726f41d96767c5dad8cfe21343")
SOURCES = {"v3": _PRE_V5, "v4": _PRE_V5, "v4.1": _PRE_V5, "v5": _V5}

TIMEOUT_REASON_NAMES = {0: "TIMEOUT_REASON_UNSPECIFIED", 1: "TIMEOUT_REASON_REFUSED", 2: "TIMEOUT_REASON_EXECUTION"}
_OLD_TIMEOUT_REASON_NAMES = {**TIMEOUT_REASON_NAMES, 3: "TIMEOUT_REASON_ERROR"}

# DevshardTx oneof members that carry no data the indexer uses: number -> (member name, message type)
_IGNORED_TXS = {7: ("reveal_seed", "MsgRevealSeed"), 8: ("finalize_round", "MsgFinalizeRound")}
_HEIGHT_SYNC_TXS = {9: ("force_height_sync_turn", "MsgForceHeightSyncTurn"), 10: ("heartbeat", "MsgHeartbeat"),
                    11: ("height_ack", "MsgHeightAck")}


@dataclass(frozen=True)
class _Features:
    height_sync: bool  # DevshardTx 9–11
    error_miss: bool  # DevshardTx.error_miss, TimeoutReason 3 reserved
    bound_version: bool  # MsgStartInference.protocol_version (9), MsgFinishInference.served_hash (10)


_PRE_V5_FEATURES = _Features(height_sync=False, error_miss=False, bound_version=False)
_FEATURES = {"v3": _PRE_V5_FEATURES, "v4": _PRE_V5_FEATURES, "v4.1": _PRE_V5_FEATURES,
             "v5": _Features(height_sync=True, error_miss=True, bound_version=True)}
VERSIONS = tuple(sorted(_FEATURES, key=version_key))
LATEST = VERSIONS[-1]
ERROR_MISS_NUMBER = 14


def _f(name: str, number: int, type_: str, **kw: Any) -> Field:
    return Field(name, number, type_, **kw)


def _vote(name: str) -> MessageType:
    # TimeoutVote and ErrorMissVote share one shape (tx.proto)
    return MessageType(name, (_f("voter_slot", 1, "uint32"), _f("accept", 2, "bool"), _f("signature", 3, "bytes")))


def _start(ft: _Features) -> MessageType:
    fields = [
        _f("inference_id", 1, "uint64"), _f("prompt_hash", 2, "bytes"), _f("model", 3, "string"),
        _f("input_length", 4, "uint64"), _f("max_tokens", 5, "uint64"), _f("started_at", 6, "int64"),
        _f("observed_height", 7, "uint64"), _f("observed_block_hash", 8, "bytes"),
    ]
    if ft.bound_version:
        fields.append(_f("protocol_version", 9, "string"))
    return MessageType("MsgStartInference", tuple(fields))


def _finish(ft: _Features) -> MessageType:
    fields = [
        _f("inference_id", 1, "uint64"), _f("response_hash", 2, "bytes"), _f("input_tokens", 3, "uint64"),
        _f("output_tokens", 4, "uint64"), _f("executor_slot", 5, "uint32"), _f("proposer_sig", 6, "bytes"),
        _f("escrow_id", 7, "string"), _f("observed_height", 8, "uint64"), _f("observed_block_hash", 9, "bytes"),
    ]
    if ft.bound_version:
        fields.append(_f("served_hash", 10, "bytes"))
    return MessageType("MsgFinishInference", tuple(fields))


_CONFIRM = MessageType("MsgConfirmStart", (
    _f("inference_id", 1, "uint64"), _f("executor_sig", 2, "bytes"), _f("confirmed_at", 3, "int64"),
    _f("observed_height", 4, "uint64"), _f("observed_block_hash", 5, "bytes")))
_TIMEOUT = MessageType("MsgTimeoutInference", (
    _f("inference_id", 1, "uint64"), _f("reason", 2, "enum", enum="TimeoutReason"),
    _f("votes", 3, "message", repeated=True, message="TimeoutVote")))
_ERROR_MISS = MessageType("MsgErrorMiss", (
    _f("inference_id", 1, "uint64"), _f("votes", 2, "message", repeated=True, message="ErrorMissVote")))
_VALIDATION = MessageType("MsgValidation", (
    _f("inference_id", 1, "uint64"), _f("validator_slot", 2, "uint32"), _f("valid", 3, "bool"),
    _f("proposer_sig", 4, "bytes"), _f("escrow_id", 5, "string")))
_VALIDATION_VOTE = MessageType("MsgValidationVote", (
    _f("inference_id", 1, "uint64"), _f("voter_slot", 2, "uint32"), _f("vote_valid", 3, "bool"),
    _f("proposer_sig", 4, "bytes"), _f("escrow_id", 5, "string")))


def _ignored(ft: _Features) -> dict[int, tuple[str, str]]:
    return {**_IGNORED_TXS, **(_HEIGHT_SYNC_TXS if ft.height_sync else {})}


def _devshard_tx(ft: _Features) -> MessageType:
    members = [
        _f("start_inference", 1, "message", message="MsgStartInference"),
        _f("confirm_start", 2, "message", message="MsgConfirmStart"),
        _f("finish_inference", 3, "message", message="MsgFinishInference"),
        _f("timeout_inference", 4, "message", message="MsgTimeoutInference"),
        _f("validation", 5, "message", message="MsgValidation"),
        _f("validation_vote", 6, "message", message="MsgValidationVote"),
    ]
    members += [_f(name, num, "message", message=msg) for num, (name, msg) in _ignored(ft).items()]
    if ft.error_miss:
        members.append(_f("error_miss", ERROR_MISS_NUMBER, "message", message="MsgErrorMiss"))
    return MessageType("DevshardTx", tuple(members), oneof=True)


_DIFF_CONTENT = MessageType("DiffContent", (
    _f("nonce", 1, "uint64"), _f("txs", 2, "message", repeated=True, message="DevshardTx"),
    _f("escrow_id", 3, "string"), _f("post_state_root", 4, "bytes"),
    _f("sealed_inference_ids", 5, "uint64", repeated=True)))


def _schema(version: str) -> Schema:
    ft = _FEATURES[version]
    messages = [_DIFF_CONTENT, _devshard_tx(ft), _start(ft), _CONFIRM, _finish(ft), _TIMEOUT, _vote("TimeoutVote"),
                _VALIDATION, _VALIDATION_VOTE]
    if ft.error_miss:
        messages += [_ERROR_MISS, _vote("ErrorMissVote")]
    messages += [MessageType(msg, ()) for _, msg in _ignored(ft).values()]
    reasons = TIMEOUT_REASON_NAMES if ft.error_miss else _OLD_TIMEOUT_REASON_NAMES
    return Schema(version, {m.name: m for m in messages}, {"TimeoutReason": reasons}, SOURCES[version])


SCHEMAS: dict[str, Schema] = {v: _schema(v) for v in VERSIONS}

# oneof member name -> its message type, for callers that walk a decoded DevshardTx
TX_MEMBERS: dict[str, str] = {f.name: f.message or "" for f in SCHEMAS[LATEST].messages["DevshardTx"].fields}


def schema_for(version: str | None, *, escrow: str | None = None, host: str | None = None) -> Schema:
    """The table of an escrow's protocol version; a version without one raises :class:`UnknownProtocolVersion`."""
    schema = SCHEMAS.get((version or "").strip())
    if schema is None:
        raise UnknownProtocolVersion(version, escrow, host)
    return schema

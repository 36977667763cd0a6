"""Devshard message tables per protocol version (``SCHEMAS['v1'] … SCHEMAS['v8']``).

Written from the field tables of gonka-devshard.md §4.1–§4.4. Where the reference gives no field
numbers we number fields in **declaration order** (1, 2, 3, … as listed in the reference). That is
an assumption for: DiffContent (all fields), MsgStartInference 1–8, MsgConfirmStart,
MsgTimeoutInference / TimeoutVote, MsgErrorMiss / ErrorMissVote, MsgValidation, MsgValidationVote.
Confirmed numbers: the DevshardTx oneof (§4.1), MsgStartInference.protocol_version = 9,
MsgFinishInference 1–10.

Version differences (our documented assumption; the reference only says that messages gained fields
and that ``protocol_version``/``served_hash``/``sealed_inference_ids``/``error_miss`` are "newer"):

=========  ====================================================================================
v1–v3      no ``error_miss`` oneof member (14); ``TimeoutReason`` 3 = ``TIMEOUT_REASON_ERROR``
           (the pre-error-miss way to report an error stream); no ``sealed_inference_ids``.
v4–v5      + ``DevshardTx.error_miss`` (14), TimeoutReason 3 reserved, + ``DiffContent.sealed_inference_ids`` (5).
v6–v8      + ``MsgStartInference.protocol_version`` (9) and ``MsgFinishInference.served_hash`` (10).
=========  ====================================================================================

A field a version does not know is not lost: the decoder keeps it under ``_unknown``.
Messages the indexer ignores (finalize_round, heartbeat, …) are declared empty, so their whole
content is preserved as unknown fields.
"""

from __future__ import annotations

from typing import Any

from indexer.wire.protobuf import Field, MessageType, Schema

VERSIONS = tuple(f"v{i}" for i in range(1, 9))
LATEST = VERSIONS[-1]

TIMEOUT_REASON_NAMES = {0: "TIMEOUT_REASON_UNSPECIFIED", 1: "TIMEOUT_REASON_REFUSED", 2: "TIMEOUT_REASON_EXECUTION"}
_OLD_TIMEOUT_REASON_NAMES = {**TIMEOUT_REASON_NAMES, 3: "TIMEOUT_REASON_ERROR"}

# DevshardTx oneof members that carry no data the indexer uses: number -> (member name, message type)
_IGNORED_TXS = {
    7: ("reveal_seed", "MsgRevealSeed"),
    8: ("finalize_round", "MsgFinalizeRound"),
    9: ("force_height_sync_turn", "MsgForceHeightSyncTurn"),
    10: ("heartbeat", "MsgHeartbeat"),
    11: ("height_ack", "MsgHeightAck"),
}


def _f(name: str, number: int, type_: str, **kw: Any) -> Field:
    return Field(name, number, type_, **kw)


def _vote(name: str) -> MessageType:
    # TimeoutVote and ErrorMissVote share one shape (§4.3), declaration order
    return MessageType(name, (_f("voter_slot", 1, "uint32"), _f("accept", 2, "bool"), _f("signature", 3, "bytes")))


def _start(n: int) -> MessageType:
    fields = [
        _f("inference_id", 1, "uint64"),
        _f("prompt_hash", 2, "bytes"),
        _f("model", 3, "string"),
        _f("input_length", 4, "uint64"),
        _f("max_tokens", 5, "uint64"),
        _f("started_at", 6, "int64"),
        _f("observed_height", 7, "uint64"),
        _f("observed_block_hash", 8, "bytes"),
    ]
    if n >= 6:
        fields.append(_f("protocol_version", 9, "string"))
    return MessageType("MsgStartInference", tuple(fields))


def _finish(n: int) -> MessageType:
    fields = [
        _f("inference_id", 1, "uint64"),
        _f("response_hash", 2, "bytes"),
        _f("input_tokens", 3, "uint64"),
        _f("output_tokens", 4, "uint64"),
        _f("executor_slot", 5, "uint32"),
        _f("proposer_sig", 6, "bytes"),
        _f("escrow_id", 7, "string"),
        _f("observed_height", 8, "uint64"),
        _f("observed_block_hash", 9, "bytes"),
    ]
    if n >= 6:
        fields.append(_f("served_hash", 10, "bytes"))
    return MessageType("MsgFinishInference", tuple(fields))


_CONFIRM = MessageType(
    "MsgConfirmStart",
    (
        _f("inference_id", 1, "uint64"),
        _f("executor_sig", 2, "bytes"),
        _f("confirmed_at", 3, "int64"),
        _f("observed_height", 4, "uint64"),
        _f("observed_block_hash", 5, "bytes"),
    ),
)
_TIMEOUT = MessageType(
    "MsgTimeoutInference",
    (
        _f("inference_id", 1, "uint64"),
        _f("reason", 2, "enum", enum="TimeoutReason"),
        _f("votes", 3, "message", repeated=True, message="TimeoutVote"),
    ),
)
_ERROR_MISS = MessageType(
    "MsgErrorMiss",
    (_f("inference_id", 1, "uint64"), _f("votes", 2, "message", repeated=True, message="ErrorMissVote")),
)
_VALIDATION = MessageType(
    "MsgValidation",
    (
        _f("inference_id", 1, "uint64"),
        _f("validator_slot", 2, "uint32"),
        _f("valid", 3, "bool"),
        _f("proposer_sig", 4, "bytes"),
        _f("escrow_id", 5, "string"),
    ),
)
_VALIDATION_VOTE = MessageType(
    "MsgValidationVote",
    (
        _f("inference_id", 1, "uint64"),
        _f("voter_slot", 2, "uint32"),
        _f("vote_valid", 3, "bool"),
        _f("proposer_sig", 4, "bytes"),
        _f("escrow_id", 5, "string"),
    ),
)


def _devshard_tx(n: int) -> MessageType:
    members = [
        _f("start_inference", 1, "message", message="MsgStartInference"),
        _f("confirm_start", 2, "message", message="MsgConfirmStart"),
        _f("finish_inference", 3, "message", message="MsgFinishInference"),
        _f("timeout_inference", 4, "message", message="MsgTimeoutInference"),
        _f("validation", 5, "message", message="MsgValidation"),
        _f("validation_vote", 6, "message", message="MsgValidationVote"),
    ]
    members += [_f(name, num, "message", message=msg) for num, (name, msg) in _IGNORED_TXS.items()]
    if n >= 4:
        members.append(_f("error_miss", 14, "message", message="MsgErrorMiss"))
    return MessageType("DevshardTx", tuple(members), oneof=True)


def _diff_content(n: int) -> MessageType:
    # field numbers are not in the reference: declaration order of §4.1 (our assumption)
    fields = [
        _f("nonce", 1, "uint64"),
        _f("txs", 2, "message", repeated=True, message="DevshardTx"),
        _f("escrow_id", 3, "string"),
        _f("post_state_root", 4, "bytes"),
    ]
    if n >= 4:
        fields.append(_f("sealed_inference_ids", 5, "uint64", repeated=True))
    return MessageType("DiffContent", tuple(fields))


def _schema(version: str) -> Schema:
    n = int(version[1:])
    messages = [
        _diff_content(n),
        _devshard_tx(n),
        _start(n),
        _CONFIRM,
        _finish(n),
        _TIMEOUT,
        _vote("TimeoutVote"),
        _VALIDATION,
        _VALIDATION_VOTE,
        _ERROR_MISS,
        _vote("ErrorMissVote"),
    ]
    messages += [MessageType(msg, ()) for _, msg in _IGNORED_TXS.values()]
    reasons = TIMEOUT_REASON_NAMES if n >= 4 else _OLD_TIMEOUT_REASON_NAMES
    return Schema(version, {m.name: m for m in messages}, {"TimeoutReason": reasons})


SCHEMAS: dict[str, Schema] = {v: _schema(v) for v in VERSIONS}

# oneof member name -> its message type, for callers that walk a decoded DevshardTx
TX_MEMBERS: dict[str, str] = {f.name: f.message or "" for f in SCHEMAS[LATEST].messages["DevshardTx"].fields}


def schema_for(version: str | None) -> Schema:
    """The schema of an escrow's protocol version; unknown/empty versions decode with the newest."""
    return SCHEMAS.get((version or "").strip().lower(), SCHEMAS[LATEST])

"""Devshard diffs: protobuf DiffContent / DevshardTx, and the host's JSON diff-log entries.

A host answers ``GET …/sessions/{id}/diffs`` with
``[{"diff":{nonce, txs:[base64 DevshardTx], user_sig, post_state_root[, escrow_id, sealed_inference_ids]}, "state_hash"}]``
(Go ``encoding/json``: integers as numbers, ``[]byte`` as base64). Each ``txs`` element is one
serialized ``DevshardTx`` (the framing is an open question in §8; this is the reading we implement).
The raw tx bytes are kept next to the decoded form because the reference says: keep raw bytes.

Two readings of an entry: :func:`diff_from_host_json` gives txs as dicts (the devnet, tests, tools);
:func:`diff_messages_from_host_json` gives them as the version's protobuf ``DevshardTx`` objects, which the
normalizer reads directly (the poller's hot path).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping

from indexer.wire.protobuf import WireDecodeError, message_class, parse
from indexer.wire.schemas import schema_for


def decode_tx(data: bytes, version: str | None) -> dict[str, Any]:
    """Decode one ``DevshardTx`` with the proto of the escrow's protocol version."""
    return schema_for(version).decode("DevshardTx", data)


def encode_tx(tx: Mapping[str, Any], version: str | None) -> bytes:
    return schema_for(version).encode("DevshardTx", tx)


def decode_diff(data: bytes, version: str | None) -> dict[str, Any]:
    """Decode a serialized ``DiffContent`` (what the user signs)."""
    return schema_for(version).decode("DiffContent", data)


def encode_diff(diff: Mapping[str, Any], version: str | None) -> bytes:
    return schema_for(version).encode("DiffContent", diff)


def b64decode(value: Any, what: str) -> bytes:
    """Strict standard base64 as Go emits it; anything else is a wire error, not a crash."""
    if value is None or value == "":
        return b""
    if not isinstance(value, str):
        raise WireDecodeError(f"{what}: expected a base64 string, got {type(value).__name__}")
    try:
        # strict_mode: the same strictness as b64decode(validate=True) without its per-call regex
        return binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError):
        raise WireDecodeError(f"{what}: invalid base64") from None


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _as_int(value: Any, what: str) -> int:
    # Go JSON gives numbers; tolerate decimal strings (some proxies stringify u64)
    if isinstance(value, bool):
        raise WireDecodeError(f"{what}: expected an integer, got bool")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise WireDecodeError(f"{what}: expected an integer, got {value!r}")


def diff_header_from_host_json(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The cheap part of :func:`diff_from_host_json`: ``{nonce, post_state_root, entry}`` without decoding the
    txs (enough to check a page's contiguity and compare state roots between hosts)."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("diff"), Mapping):
        raise WireDecodeError("diff entry: expected an object with a 'diff' object")
    diff = entry["diff"]
    nonce = _as_int(diff.get("nonce"), "diff.nonce")
    return {"nonce": nonce, "post_state_root": b64decode(diff.get("post_state_root"), f"diff {nonce} post_state_root"),
            "entry": entry}


def diff_from_host_json(entry: Mapping[str, Any], version: str | None) -> dict[str, Any]:
    """One host diff-log entry → ``{nonce, txs, escrow_id, post_state_root, sealed_inference_ids,
    user_sig, state_hash, raw_txs}`` with txs decoded (dicts) and all byte fields as ``bytes``."""
    _check_entry(entry, None)
    schema = schema_for(version)  # an unknown version fails here, even for a diff without txs
    return _diff(entry, "diff", lambda raw: schema.decode("DevshardTx", raw))


def diff_messages_from_host_json(entry: Mapping[str, Any], version: str | None,
                                 escrow_id: str | None = None) -> dict[str, Any]:
    """:func:`diff_from_host_json` with ``txs`` as parsed ``DevshardTx`` message objects (unknown fields kept).

    A malformed tx is a :class:`WireDecodeError` naming the escrow, the nonce and the tx's index; an unknown version
    an :class:`~indexer.wire.schemas.UnknownProtocolVersion` naming the escrow."""
    _check_entry(entry, escrow_id)
    schema = schema_for(version, escrow=escrow_id)
    from_string = message_class(schema, "DevshardTx").FromString

    def decode(raw: bytes):
        try:
            return from_string(raw)
        except Exception:  # the library's DecodeError: parse() names the offset and the reason
            parse(schema, "DevshardTx", raw)
            raise

    return _diff(entry, f"escrow {escrow_id or '?'} diff", decode)


def _check_entry(entry: Any, escrow_id: str | None) -> None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("diff"), Mapping):
        where = f"escrow {escrow_id}: " if escrow_id else ""
        raise WireDecodeError(f"{where}diff entry: expected an object with a 'diff' object")


def _diff(entry: Mapping[str, Any], label: str, decode_tx) -> dict[str, Any]:
    """The fields of a checked diff entry, its txs decoded by ``decode_tx``; errors name ``label``, nonce, field."""
    diff = entry["diff"]
    nonce = _as_int(diff.get("nonce"), "diff.nonce")
    where = f"{label} {nonce}"
    raw_txs = [b64decode(t, f"{where} txs[{i}]") for i, t in enumerate(diff.get("txs") or [])]
    txs = []
    for i, raw in enumerate(raw_txs):
        try:
            txs.append(decode_tx(raw))
        except WireDecodeError as exc:
            raise WireDecodeError(f"{where} txs[{i}]: {exc}") from None
    return {
        "nonce": nonce,
        "txs": txs,
        "escrow_id": str(diff.get("escrow_id") or ""),
        "post_state_root": b64decode(diff.get("post_state_root"), f"{where} post_state_root"),
        "sealed_inference_ids": [_as_int(x, "sealed_inference_ids") for x in diff.get("sealed_inference_ids") or []],
        "user_sig": b64decode(diff.get("user_sig"), f"{where} user_sig"),
        "state_hash": b64decode(entry.get("state_hash"), f"{where} state_hash"),
        "raw_txs": raw_txs,
    }


def diff_to_host_json(
    diff: Mapping[str, Any], version: str | None, user_sig: bytes, state_hash: bytes
) -> dict[str, Any]:
    """The inverse of :func:`diff_from_host_json` (used by the devnet host)."""
    body: dict[str, Any] = {
        "nonce": diff["nonce"],
        "txs": [b64encode(encode_tx(tx, version)) for tx in diff.get("txs", [])],
        "user_sig": b64encode(user_sig),
        "post_state_root": b64encode(diff.get("post_state_root", b"")),
        "escrow_id": diff.get("escrow_id", ""),
    }
    if diff.get("sealed_inference_ids"):
        body["sealed_inference_ids"] = list(diff["sealed_inference_ids"])
    return {"diff": body, "state_hash": b64encode(state_hash)}

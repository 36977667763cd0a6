"""CometBFT RPC JSON: ``tx_search`` results, events and ``status``.

Some node versions base64-encode event attribute keys and values (§5.1, inferred). We detect that
per event: if every key decodes as base64 to a plain identifier, the event is encoded; a plain key
such as ``escrow_id`` is never valid base64 (``_`` is not in the alphabet), so this cannot misfire
on our event types.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, Mapping

from indexer.wire.normalize import NormalizeError, parse_u64

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


@dataclass(frozen=True)
class TxEvent:
    height: int
    tx_hash: str
    type: str
    attributes: dict[str, str]


def _b64_text(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


def _attributes(attrs: list[Mapping[str, Any]]) -> dict[str, str]:
    keys = [_b64_text(a.get("key")) for a in attrs]
    encoded = bool(attrs) and all(k is not None and _IDENT.match(k) for k in keys)
    out: dict[str, str] = {}
    for a, decoded_key in zip(attrs, keys):
        if encoded:
            out[decoded_key or ""] = _b64_text(a.get("value")) or ""
        else:
            out[str(a.get("key"))] = "" if a.get("value") is None else str(a.get("value"))
    return out


def _result(data: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise NormalizeError("RPC: expected a JSON object")
    if data.get("error"):
        err = data["error"]
        raise NormalizeError(f"RPC error: {err.get('message', '')} {err.get('data', '')}".strip())
    result = data.get("result")
    if not isinstance(result, Mapping):
        raise NormalizeError("RPC: missing 'result'")
    return result


def tx_search_total(data: Mapping[str, Any]) -> int:
    return parse_u64(_result(data).get("total_count", 0), "total_count")


def tx_search_events(data: Mapping[str, Any], event_type: str | None = None) -> list[TxEvent]:
    """All events (of ``event_type`` if given) of successful txs in one ``tx_search`` page."""
    out = []
    for tx in _result(data).get("txs") or []:
        res = tx.get("tx_result") or {}
        if res.get("code", 0) not in (0, "0"):
            continue  # failed txs emit no state change
        height = parse_u64(tx.get("height", 0), "height")
        for ev in res.get("events") or []:
            if event_type is None or ev.get("type") == event_type:
                attrs = _attributes(ev.get("attributes") or [])
                out.append(TxEvent(height, str(tx.get("hash", "")), str(ev.get("type")), attrs))
    return out


def latest_block_height(data: Mapping[str, Any]) -> int:
    """``/status`` → ``result.sync_info.latest_block_height``."""
    return parse_u64(_result(data)["sync_info"]["latest_block_height"], "latest_block_height")


@dataclass(frozen=True)
class TxAnswer:
    """CometBFT ``/tx`` of one transaction: its hash and height as the node states them, its result code and the
    broadcast ``TxRaw`` (base64 decoded, strict)."""
    tx_hash: str
    height: int
    code: int
    tx_raw: bytes


def tx_answer(data: Mapping[str, Any]) -> TxAnswer:
    result = _result(data)
    encoded = result.get("tx")
    if not isinstance(encoded, str) or not encoded:
        raise NormalizeError("RPC /tx: 'result.tx' is not a base64 string")
    try:
        raw = binascii.a2b_base64(encoded, strict_mode=True)
    except (binascii.Error, ValueError):
        raise NormalizeError("RPC /tx: 'result.tx' is not strict base64") from None
    code = (result.get("tx_result") or {}).get("code", 0)
    return TxAnswer(str(result.get("hash", "")), parse_u64(result.get("height"), "result.height"),
                    parse_u64(code or 0, "tx_result.code"), raw)

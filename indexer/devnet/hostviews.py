"""Devshard host JSON (Go ``encoding/json``): integers as numbers, ``[]byte`` base64, PascalCase
untagged structs (``group``), string slot keys (§5.2, §5.4, F11)."""

from __future__ import annotations

import base64
import json
from bisect import bisect_left, bisect_right
from typing import Any, Sequence

from indexer.devnet import settling
from indexer.devnet.models import HostSpec
from indexer.devnet.scenario import EscrowSim
from indexer.devnet.world import Devnet
from indexer.wire.diffs import diff_to_host_json

MAX_DIFFS_PER_PAGE = 64
BINARY_VERSION = "devshard-v7.3.1-devnet"


def compact_json(obj: Any) -> bytes:
    """A body as Go's ``encoding/json`` writes it: no space after separators."""
    return json.dumps(obj, separators=(",", ":")).encode()


def host_escrows(net: Devnet, host: HostSpec) -> list[EscrowSim]:
    """Sessions this host keeps: live escrows where it holds a slot."""
    return [e for e in net.scenario.escrows.values() if net.live(e) and host.address in e.slots]


def session(net: Devnet, host: HostSpec, escrow_id: str, version: str | None) -> EscrowSim | None:
    """The host's live session of ``escrow_id`` bound to ``version`` (None: whatever version it is bound to)."""
    esc = net.escrow(escrow_id)
    if esc is None or not net.live(esc) or host.address not in esc.slots:
        return None
    return esc if version is None or esc.protocol_version == version else None


def healthz_json(versions: Sequence[str]) -> list[dict[str, str]]:
    return [{"name": name, "status": "ok"} for name in versions]


def shards_json(net: Devnet, host: HostSpec, version: str) -> dict[str, Any]:
    """``stats/shards``: current epoch only."""
    current = [e for e in host_escrows(net, host) if e.epoch_index == net.current_epoch and e.protocol_version == version]
    return {"protocol_version": version, "binary_version": BINARY_VERSION, "current_epoch_id": net.current_epoch,
            "cached_at": net.now(), "cache_ttl_seconds": 60, "active_escrows": [e.escrow_id for e in current],
            "shards": [{"escrow_id": e.escrow_id, "epoch_id": e.epoch_index} for e in current]}


def shard_detail_json(net: Devnet, esc: EscrowSim) -> dict[str, Any]:
    """F11: final per-slot host stats of the session, plus observability and the slot group."""
    stats = esc.host_stats()
    required, completed = esc.log.validation_sampled, {}
    for r in esc.log.records:
        if r["kind"] == "validation":
            completed[r["validator_slot"]] = completed.get(r["validator_slot"], 0) + 1
    by_slot = {str(i): {"missed": 0, "invalid": 0, "cost": 0, "required_validations": required.get(i, 0),
                        "completed_validations": completed.get(i, 0)} for i in range(len(stats))}
    return {
        "escrow_id": esc.escrow_id, "epoch_id": esc.epoch_index, "nonce": esc.last_nonce,
        "version": esc.protocol_version, "state_root_and_protocol_version": esc.protocol_version,
        "cached_at": net.now(), "cache_ttl_seconds": 60,
        "host_stats": {str(i): s for i, s in enumerate(stats)},
        "validation_observability": {
            "by_slot": by_slot,
            "totals": {"required_validations": sum(required.values()),
                       "completed_validations": sum(completed.values())}},
        "group": [{"SlotID": i, "ValidatorAddress": addr} for i, addr in enumerate(esc.slots)],
    }


def encoded_log(net: Devnet, esc: EscrowSim, lying: bool | str) -> tuple[list[int], list[bytes]]:
    """(nonces, JSON bytes per entry) of one host's view of an escrow's log, encoded once: the devnet's logs
    never change after generation, so a page is a slice of precomputed bytes instead of a re-encoding."""
    key = (esc.escrow_id, lying)
    cached = net.encoded_logs.get(key)
    if cached is None:
        nonces, entries = [], []
        for d, sig, root in net.scenario.host_diff_log(esc, lying=lying):
            nonces.append(d["nonce"])
            entries.append(compact_json(diff_to_host_json(d, esc.protocol_version, sig, root)))
        cached = net.encoded_logs.setdefault(key, (nonces, entries))
    return cached


def warm(net: Devnet, lying: str | None = None, lying_kind: str = "altered") -> None:
    """Encode every host's view of every diff log, and every stored payload, now (a real host serves stored
    bytes), so that serving a page or a payload never pays for encoding. ``lying``: the lying host's address,
    whose view of the log differs (its payloads do not)."""
    for esc in net.scenario.escrows.values():
        encoded_log(net, esc, False)
        if lying is not None and lying in esc.slots:
            encoded_log(net, esc, lying_kind)
        for inference_id in esc.log.payloads:
            payload_body(net, esc, inference_id)


def diffs_body(net: Devnet, esc: EscrowSim, first: int, last: int, lying: bool | str) -> bytes:
    """The JSON body of ``diffs?from=first&to=last``: a slice of the encoded log."""
    nonces, entries = encoded_log(net, esc, lying)
    lo, hi = bisect_left(nonces, first), bisect_right(nonces, last)
    return b"[" + b",".join(entries[lo:hi]) + b"]"


def signatures_json(net: Devnet, esc: EscrowSim, nonce: int) -> dict[str, Any] | None:
    """``SignaturesResponse``: each slot's co-signature (``StateSignatureContent``) of the root after ``nonce``."""
    if not 1 <= nonce <= esc.last_nonce:
        return None
    return {"signatures": settling.signatures_at(net.scenario.keys, esc, esc.roots[nonce - 1], nonce)}


def payload_body(net: Devnet, esc: EscrowSim, inference_id: int) -> bytes | None:
    """The JSON body of :func:`payload_json`, encoded once (a stored payload never changes), or None."""
    key = (esc.escrow_id, inference_id)
    body = net.encoded_payloads.get(key)
    if body is None:
        obj = payload_json(esc, inference_id)
        if obj is None:
            return None
        body = net.encoded_payloads.setdefault(key, compact_json(obj))
    return body


def payload_json(esc: EscrowSim, inference_id: int) -> dict[str, Any] | None:
    """A host's payload response, as ``validation.PayloadResponse`` is written (HostManager.HandlePayloads): the
    inference id as a string, the stored prompt and response payloads as Go ``[]byte``, i.e. standard base64 in
    JSON, and the executor's signature."""
    response = esc.log.payloads.get(inference_id)
    if response is None:
        return None
    prompt = json.dumps(esc.log.prompts[inference_id], separators=(",", ":"))
    return {"inference_id": str(inference_id),
            "prompt_payload": base64.b64encode(prompt.encode()).decode(),
            "response_payload": base64.b64encode(response.encode()).decode(),
            "executor_signature": base64.b64encode(esc.log.receipts.get(inference_id, b"")).decode()}


def made_up_payload_json(inference_id: str, body: str) -> dict[str, Any]:
    """A payload response of the right shape whose stored response is ``body``, whatever the Finish signed: what a
    lying member serves (the indexer must not take it: its sha256 is not the Finish's response_hash)."""
    return {"inference_id": inference_id, "prompt_payload": "",
            "response_payload": base64.b64encode(body.encode()).decode(), "executor_signature": ""}

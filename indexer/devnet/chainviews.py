"""Chain REST (grpc-gateway) and CometBFT RPC JSON of the devnet, in the real shapes (§5.1, §7).

grpc-gateway quirks kept on purpose: 64-bit integers as strings, 32-bit as numbers, decimals as
``{value, exponent}``. Epoch-level bodies (epoch_info, params, epoch groups, performance summaries,
exclusions) are in :mod:`indexer.devnet.epochviews`. CometBFT: ``total_count`` and heights as strings, optional base64 attributes.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from indexer.devnet.models import MODELS_BY_ID
from indexer.devnet.scenario import EscrowSim
from indexer.devnet.world import Devnet

MODULE = "/inference.inference"


def _dec(value: str, exponent: int) -> dict[str, Any]:
    return {"value": value, "exponent": exponent}


def current_epoch_json(net: Devnet) -> dict[str, Any]:
    return {"epoch": str(net.current_epoch)}


def model_snapshot_json(model_id: str) -> dict[str, Any]:
    m = MODELS_BY_ID[model_id]
    return {"proposed_by": "gonka1govauthority", "id": m.model_id, "units_of_compute_per_token": "1000",
            "context_window": "400000", "quantization": m.quantization, "coins_per_input_token": "0",
            "coins_per_output_token": "0", "hf_repo": m.model_id, "hf_commit": "0" * 40,
            "model_args": list(m.model_args), "v_ram": "640", "throughput_per_nonce": "1000",
            "validation_threshold": _dec("97", -2)}


def escrow_json(net: Devnet, esc: EscrowSim, max_model_len_mode: str | None = None) -> dict[str, Any]:
    """F3 (newer field set). ``max_model_len_mode``: None (released code: absent), "string" or "number"."""
    if not net.live(esc):
        return {"found": False}
    body: dict[str, Any] = {
        "id": esc.escrow_id, "creator": esc.creator, "amount": str(esc.amount), "slots": list(esc.slots),
        "epoch_index": str(esc.epoch_index),
        "app_hash": hashlib.sha256(f"app-{esc.escrow_id}".encode()).hexdigest(),
        "settled": net.settled(esc), "token_price": str(esc.token_price), "model_id": esc.model.model_id,
        "create_devshard_fee": "10000", "fee_per_nonce": "1000", "inference_seal_grace_nonces": 160,
        "inference_seal_grace_seconds": 3600, "auto_seal_every_n_nonces": 150,
        "validation_rate": esc.validation_rate, "vote_threshold_factor": esc.vote_threshold_factor,
        "logprobs_mode": "processed_logprobs",
    }
    if max_model_len_mode == "string":
        body["max_model_len"] = str(esc.governance_limit)
    elif max_model_len_mode == "number":
        body["max_model_len"] = esc.governance_limit
    return {"escrow": body, "found": True}


def host_epoch_stats_json(net: Devnet, epoch_index: int, participant: str) -> dict[str, Any]:
    # stats exist once the epoch's escrows settled, until pruning
    if epoch_index >= net.current_epoch or net.pruned_epoch(epoch_index):
        return {"found": False}
    stats = net.scenario.host_epoch_stats(epoch_index).get(participant)
    if stats is None:
        return {"found": False}
    return {"stats": {"participant": participant, "epoch_index": str(epoch_index), "missed": stats["missed"],
                      "invalid": stats["invalid"], "cost": str(stats["cost"]),
                      "required_validations": stats["required_validations"],
                      "completed_validations": stats["completed_validations"],
                      "escrow_count": stats["escrow_count"]},
            "found": True}


def participant_json(net: Devnet, address: str, inference_url: str) -> dict[str, Any] | None:
    host = net.scenario.hosts_by_address.get(address)
    if host is None:
        return None
    zero = {k: "0" for k in ("inference_count", "missed_requests", "earned_coins", "rewarded_coins",
                             "burned_coins", "validated_inferences", "invalidated_inferences")}
    return {"participant": {"index": address, "address": address, "weight": -1, "join_time": "1790000000000",
                            "join_height": "100", "inference_url": inference_url, "status": "ACTIVE",
                            "models": list(MODELS_BY_ID), "current_epoch_stats": zero}}


def status_json(net: Devnet) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": -1, "result": {
        "node_info": {"network": "gonka-devnet", "version": "0.38.17", "moniker": "devnet"},
        "sync_info": {"latest_block_hash": hashlib.sha256(str(net.latest_height()).encode()).hexdigest().upper(),
                      "latest_block_height": str(net.latest_height()), "latest_block_time": "2026-09-21T10:00:00Z",
                      "catching_up": False}}}


# --------------------------------------------------------------------------- tx_search


def _attrs(pairs: dict[str, str], b64: bool) -> list[dict[str, Any]]:
    enc = (lambda s: base64.b64encode(s.encode()).decode()) if b64 else (lambda s: s)
    return [{"key": enc(k), "value": enc(v), "index": True} for k, v in pairs.items()]


def _tx(height: int, kind: str, msg_type: str, pairs: dict[str, str], b64: bool) -> dict[str, Any]:
    tx_hash = hashlib.sha256(f"{kind}-{pairs['escrow_id']}".encode()).hexdigest().upper()
    events = [{"type": "message", "attributes": _attrs({"action": f"{MODULE}.{msg_type}"}, b64)},
              {"type": kind, "attributes": _attrs(pairs, b64)}]
    return {"hash": tx_hash, "height": str(height), "index": 0,
            "tx_result": {"code": 0, "data": "", "log": "", "gas_wanted": "200000", "gas_used": "120000",
                          "events": events},
            "tx": base64.b64encode(f"devnet-tx-{tx_hash}".encode()).decode()}


def all_txs(net: Devnet, b64: bool, unindexed: frozenset[str] = frozenset()
            ) -> list[tuple[dict[str, dict[str, str]], dict[str, Any]]]:
    """Every indexed tx up to the tip, with its plain events for query matching; ``unindexed``: escrows whose
    settlement the node's tx index does not have yet."""
    out = []
    for epoch in net.scenario.epochs:
        for esc in epoch.escrows:
            if not net.created(esc):
                continue
            created = {"escrow_id": esc.escrow_id, "creator": esc.creator, "amount": str(esc.amount),
                       "epoch_index": str(esc.epoch_index), "model_id": esc.model.model_id}
            out.append(({"devshard_escrow_created": created, "tm": {"event": "Tx"}},
                        _tx(esc.created_height, "devshard_escrow_created", "MsgCreateDevshardEscrow", created, b64)))
            if net.settled(esc) and esc.escrow_id not in unindexed:
                settled = {"escrow_id": esc.escrow_id, "settler": esc.slots[0], "total_payout": str(esc.amount),
                           "fees": str(10000 + 1000 * esc.last_nonce), "remainder": "0",
                           "state_root_and_protocol_version": esc.protocol_version}
                out.append(({"devshard_escrow_settled": settled, "tm": {"event": "Tx"}},
                            _tx(net.settle_height(esc), "devshard_escrow_settled", "MsgSettleDevshardEscrow",
                                settled, b64)))
    return out


_COND = re.compile(r"^\s*([\w.]+)\s*(=|>=|<=|>|<|\s+EXISTS)\s*(?:'([^']*)'|(\d+))?\s*$")


def _matches(events: dict[str, dict[str, str]], height: int, condition: str) -> bool:
    m = _COND.match(condition)
    if not m:
        raise ValueError(f"invalid query condition: {condition!r}")
    key, op, text, number = m.group(1), m.group(2).strip(), m.group(3), m.group(4)
    if key == "tx.height":
        ops = {"=": int.__eq__, ">=": int.__ge__, "<=": int.__le__, ">": int.__gt__, "<": int.__lt__}
        return ops[op](height, int(number if number is not None else text))
    etype, _, attr = key.rpartition(".")
    value = events.get(etype, {}).get(attr)
    if op == "EXISTS":
        return value is not None
    return op == "=" and value == (text if text is not None else number)


def tx_search_json(net: Devnet, query: str, page: int, per_page: int, order: str, b64: bool,
                   unindexed: frozenset[str] = frozenset()) -> tuple[int, dict]:
    """(HTTP status, body). Paging and errors follow CometBFT (1-based pages, per_page ≤ 100)."""
    query = query.strip().strip('"')
    conditions = [c for c in re.split(r"\s+AND\s+", query) if c.strip()]
    try:
        hits = [(tx, int(tx["height"])) for events, tx in all_txs(net, b64, unindexed)
                if all(_matches(events, int(tx["height"]), c) for c in conditions)]
    except ValueError as exc:
        return 500, {"jsonrpc": "2.0", "id": -1, "error": {"code": -32603, "message": "Internal error",
                                                           "data": str(exc)}}
    hits.sort(key=lambda h: h[1], reverse=order.strip('"') == "desc")
    per_page = max(1, min(per_page, 100))
    pages = max(1, -(-len(hits) // per_page))
    if not 1 <= page <= pages:
        return 500, {"jsonrpc": "2.0", "id": -1, "error": {
            "code": -32603, "message": "Internal error", "data": f"page should be within [1, {pages}] range, given {page}"}}
    chunk = [tx for tx, _ in hits[(page - 1) * per_page : page * per_page]]
    return 200, {"jsonrpc": "2.0", "id": -1, "result": {"txs": chunk, "total_count": str(len(hits))}}

"""Chain REST (grpc-gateway) and CometBFT RPC JSON of the devnet, in the real shapes (§5.1, §7).

grpc-gateway quirks kept on purpose: 64-bit integers as strings, 32-bit as numbers, decimals as
``{value, exponent}``; CometBFT: ``total_count`` and heights as strings, optional base64 attributes.
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


def params_json(net: Devnet) -> dict[str, Any]:
    cfg = net.scenario.config
    escrow_params = {
        "min_amount": "1000000000", "max_amount": "100000000000", "max_escrows_per_epoch": 500000,
        "group_size": cfg.group_size, "allowed_creator_addresses": [], "token_price": str(cfg.token_price),
        "approved_versions": [{"name": cfg.protocol_version, "binary": f"https://example.invalid/devshard-{cfg.protocol_version}.zip",
                               "sha256": hashlib.sha256(cfg.protocol_version.encode()).hexdigest()}],
        "max_nonce": 1000000, "default_inference_seal_grace_nonces": 160,
        "default_inference_seal_grace_seconds": 3600, "default_auto_seal_every_n_nonces": 150,
        "devshard_requests_enabled": True, "create_devshard_fee": "10000", "fee_per_nonce": "1000",
        "refusal_timeout": "60", "execution_timeout": "1920", "validation_rate": cfg.validation_rate,
        "vote_threshold_factor": cfg.vote_threshold_factor,
    }
    return {"params": {"devshard_escrow_params": escrow_params, "validation_params": validation_params(),
                       "epoch_params": {"epoch_length": str(cfg.blocks_per_epoch), "epoch_shift": "0",
                                        "poc_stage_duration": "60"}}}


def validation_params() -> dict[str, Any]:
    return {"false_positive_rate": _dec("5", -2), "binom_test_p0": _dec("10", -2),
            "invalidation_h_threshold": _dec("40", 0), "bad_participant_invalidation_rate": _dec("20", -2),
            "expiration_blocks": "20", "timestamp_expiration": "60"}


def current_epoch_json(net: Devnet) -> dict[str, Any]:
    return {"epoch": str(net.current_epoch)}


def epoch_info_json(net: Devnet) -> dict[str, Any]:
    start = net.scenario.epoch_start(net.current_epoch)[0]
    return {"block_height": str(net.latest_height()), "params": params_json(net)["params"]["epoch_params"],
            "latest_epoch": {"index": str(net.current_epoch), "poc_start_block_height": str(start)}}


def _weights(net: Devnet) -> list[dict[str, Any]]:
    return [{"member_address": h.address, "weight": str(100000 + 37000 * h.index), "reputation": 100,
             "ml_nodes": [], "confirmation_weight": str(100000 + 37000 * h.index),
             "voting_power": str(100000 + 37000 * h.index)} for h in net.scenario.hosts]


def model_snapshot_json(model_id: str) -> dict[str, Any]:
    m = MODELS_BY_ID[model_id]
    return {"proposed_by": "gonka1govauthority", "id": m.model_id, "units_of_compute_per_token": "1000",
            "context_window": "400000", "quantization": m.quantization, "coins_per_input_token": "0",
            "coins_per_output_token": "0", "hf_repo": m.model_id, "hf_commit": "0" * 40,
            "model_args": list(m.model_args), "v_ram": "640", "throughput_per_nonce": "1000",
            "validation_threshold": _dec("97", -2)}


def epoch_group_data_json(net: Devnet, epoch_index: int, model_id: str | None) -> dict[str, Any] | None:
    """Root group (``model_id == ""`` + ``sub_group_models``) or one model sub-group; None = not found."""
    epoch = net.scenario.epoch(epoch_index)
    if epoch is None or epoch_index > net.current_epoch:
        return None
    models = [m.model_id for m in epoch.models]
    if model_id and model_id not in models:
        return None
    weights = _weights(net)
    group = {
        "poc_start_block_height": str(epoch.start_height), "epoch_group_id": str(4 + epoch_index * 4),
        "epoch_policy": "", "effective_block_height": str(epoch.start_height + 60),
        "last_block_height": "0", "member_seed_signatures": [], "validation_weights": weights,
        "unit_of_compute_price": "100", "number_of_requests": "0", "previous_epoch_requests": "0",
        "validation_params": validation_params(), "total_weight": str(sum(int(w["weight"]) for w in weights)),
        "model_id": model_id or "", "sub_group_models": [] if model_id else models,
        "epoch_index": str(epoch_index), "total_throughput": "0", "confirmation_weight_scales": [],
    }
    if model_id:
        group["epoch_group_id"] = str(4 + epoch_index * 4 + 1 + models.index(model_id))
        group["model_snapshot"] = model_snapshot_json(model_id)
    return {"epoch_group_data": group}


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


def all_txs(net: Devnet, b64: bool) -> list[tuple[dict[str, dict[str, str]], dict[str, Any]]]:
    """Every indexed tx up to the tip, with its plain events for query matching."""
    out = []
    for epoch in net.scenario.epochs:
        for esc in epoch.escrows:
            if not net.created(esc):
                continue
            created = {"escrow_id": esc.escrow_id, "creator": esc.creator, "amount": str(esc.amount),
                       "epoch_index": str(esc.epoch_index), "model_id": esc.model.model_id}
            out.append(({"devshard_escrow_created": created, "tm": {"event": "Tx"}},
                        _tx(esc.created_height, "devshard_escrow_created", "MsgCreateDevshardEscrow", created, b64)))
            if net.settled(esc):
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


def tx_search_json(net: Devnet, query: str, page: int, per_page: int, order: str, b64: bool) -> tuple[int, dict]:
    """(HTTP status, body). Paging and errors follow CometBFT (1-based pages, per_page ≤ 100)."""
    query = query.strip().strip('"')
    conditions = [c for c in re.split(r"\s+AND\s+", query) if c.strip()]
    try:
        hits = [(tx, int(tx["height"])) for events, tx in all_txs(net, b64)
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

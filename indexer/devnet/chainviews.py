"""Chain REST (grpc-gateway) and CometBFT RPC JSON of the devnet, in the real shapes (§5.1, §7).

grpc-gateway quirks kept on purpose: 64-bit integers as strings, 32-bit as numbers, decimals as
``{value, exponent}``. Epoch-level bodies (epoch_info, params, epoch groups, performance summaries,
exclusions) are in :mod:`indexer.devnet.epochviews`. CometBFT: ``total_count`` and heights as strings, optional base64 attributes.
"""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import datetime, timezone
from typing import Any

from indexer.devnet import settling
from indexer.devnet.keys import WARM_GRANT_TYPE
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
        # session parameters captured at creation (devshard_escrow.proto @056f1980: max_nonce uint32, the timeouts
        # int64, so JSON strings)
        "max_nonce": net.scenario.config.max_nonce, "refusal_timeout": str(net.scenario.config.refusal_timeout),
        "execution_timeout": str(esc.session_config.execution_timeout),
        "create_devshard_fee": str(esc.session_config.create_fee),
        "fee_per_nonce": str(esc.session_config.fee_per_nonce),
        "inference_seal_grace_nonces": esc.session_config.seal_grace_nonces,
        "inference_seal_grace_seconds": esc.session_config.seal_grace_seconds,
        "auto_seal_every_n_nonces": esc.session_config.auto_seal_every,
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


def grantees_json(net: Devnet, granter: str, msg_type: str) -> dict[str, Any]:
    """``QueryGranteesByMessageTypeResponse``: each grantee's address and public key (base64 compressed key)."""
    keys = net.scenario.keys
    warm = keys.warm_of(granter) if msg_type == WARM_GRANT_TYPE else None
    return {"grantees": [] if warm is None else [
        {"address": warm, "pub_key": base64.b64encode(keys.public_key(warm)).decode()}]}


def status_json(net: Devnet, earliest: int = 1) -> dict[str, Any]:
    """CometBFT ``status``: ``earliest_block_height`` is the oldest block the node keeps (older ones are pruned)."""
    return {"jsonrpc": "2.0", "id": -1, "result": {
        "node_info": {"network": "gonka-devnet", "version": "0.38.17", "moniker": "devnet"},
        "sync_info": {"latest_block_hash": hashlib.sha256(str(net.latest_height()).encode()).hexdigest().upper(),
                      "latest_block_height": str(net.latest_height()), "latest_block_time": "2026-09-21T10:00:00Z",
                      "earliest_block_height": str(earliest), "catching_up": False}}}


# --------------------------------------------------------------------------- tx_search


def _attrs(pairs: dict[str, str], b64: bool) -> list[dict[str, Any]]:
    enc = (lambda s: base64.b64encode(s.encode()).decode()) if b64 else (lambda s: s)
    return [{"key": enc(k), "value": enc(v), "index": True} for k, v in pairs.items()]


def _events(kind: str, msg_type: str, pairs: dict[str, str], b64: bool) -> list[dict[str, Any]]:
    return [{"type": "message", "attributes": _attrs({"action": f"{MODULE}.{msg_type}"}, b64)},
            {"type": kind, "attributes": _attrs(pairs, b64)}]


def _tx(height: int, kind: str, msg_type: str, pairs: dict[str, str], b64: bool,
        raw: bytes | None = None) -> dict[str, Any]:
    """A tx_search result: ``tx`` is the base64 of the broadcast TxRaw and ``hash`` its sha256 (a stand-in body for
    the txs the devnet does not build, escrow creation)."""
    raw = raw if raw is not None else f"devnet-tx-{kind}-{pairs['escrow_id']}".encode()
    return {"hash": hashlib.sha256(raw).hexdigest().upper(), "height": str(height), "index": 0,
            "tx_result": {"code": 0, "data": "", "log": "", "gas_wanted": "200000", "gas_used": "120000",
                          "events": _events(kind, msg_type, pairs, b64)},
            "tx": base64.b64encode(raw).decode()}


def settled_attributes(esc: EscrowSim) -> dict[str, str]:
    """The ``devshard_escrow_settled`` event: the settler is the creator; hosts are paid the total cost, the user
    gets back what is left after cost and fees."""
    cost = sum(s.cost for s in esc.state.stats)
    return {"escrow_id": esc.escrow_id, "settler": esc.creator, "total_payout": str(cost), "fees": str(esc.fees),
            "remainder": str(esc.amount - cost - esc.fees), "state_root_and_protocol_version": esc.protocol_version}


def settlement_tx(net: Devnet, esc: EscrowSim):
    """The escrow's settlement transaction (None while unsettled, or when its version's rules are not ported)."""
    return net.scenario.settlement(esc, net.settle_height(esc)) if net.settled(esc) else None


def get_tx_json(net: Devnet, tx_hash: str) -> dict[str, Any] | None:
    """``GET /cosmos/tx/v1beta1/txs/{hash}`` of a settlement (None: no such transaction)."""
    for epoch in net.scenario.epochs:
        for esc in epoch.escrows:
            tx = settlement_tx(net, esc) if net.created(esc) else None
            if tx is not None and tx.hash == tx_hash.upper():
                events = _events("devshard_escrow_settled", "MsgSettleDevshardEscrow", settled_attributes(esc), False)
                return settling.tx_json(tx, net.scenario.keys, events, _timestamp(net, tx.height))
    return None


def _timestamp(net: Devnet, height: int) -> str:
    cfg = net.scenario.config
    unix = cfg.genesis_time + (height - cfg.genesis_height) * cfg.seconds_per_block
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
                settled, tx = settled_attributes(esc), settlement_tx(net, esc)
                out.append(({"devshard_escrow_settled": settled, "tm": {"event": "Tx"}},
                            _tx(net.settle_height(esc), "devshard_escrow_settled", "MsgSettleDevshardEscrow",
                                settled, b64, tx.raw if tx is not None else None)))
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

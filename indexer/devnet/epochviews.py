"""Epoch-level chain REST of the devnet in mainnet's shapes: ``epoch_info``, ``params`` (as of a height),
``epoch_group_data``, ``epoch_performance_summary`` and ``excluded_participants``.

tests/devnet/test_devnet_mainnet_shapes.py holds every body here to the structure of the real captures in
tests/cases/fixtures/mainnet/ (keys, nesting, JSON types), so the devnet cannot drift from mainnet again.

History the devnet simulates so that "the epoch's own parameters" means something: a governance proposal raises
``invalidation_h_threshold`` from 4 to 40 and ``bad_participant_invalidation_rate`` from 0.1 to 0.18 at
:func:`governance_height` (500 blocks into the second epoch, as proposal 96 did on mainnet after epoch 366).
Each root epoch group keeps the values in force at its start; ``/params`` answers the values at the height asked.
"""

from __future__ import annotations

from typing import Any

from indexer.devnet import downtime, payouts
from indexer.devnet.models import MODELS
from indexer.devnet.world import Devnet


def _dec(value: str, exponent: int) -> dict[str, Any]:
    return {"value": value, "exponent": exponent}


def governance_height(net: Devnet) -> int:
    return net.scenario.epoch_start(net.scenario.config.first_epoch + 1)[0] + 500


def validation_params(net: Devnet, height: int) -> dict[str, Any]:
    """The module's validation params at ``height`` (the field set of mainnet's, proto order)."""
    raised = height >= governance_height(net)
    return {
        "false_positive_rate": _dec("5", -2), "min_ramp_up_measurements": 10, "pass_value": _dec("99", -2),
        "min_validation_average": _dec("1", -2), "max_validation_average": _dec("1", 0),
        "expiration_blocks": "20", "epochs_to_max": "30", "full_validation_traffic_cutoff": "10000",
        "min_validation_halfway": _dec("5", -2), "min_validation_traffic_cutoff": "100",
        "miss_percentage_cutoff": _dec("1", -2), "miss_requests_penalty": _dec("1", 0),
        "timestamp_expiration": "60", "timestamp_advance": "30", "estimated_limits_per_block_kb": "0",
        "invalid_reputation_preserve": _dec("0", 0),
        "bad_participant_invalidation_rate": _dec("18", -2) if raised else _dec("1", -1),
        "invalidation_h_threshold": _dec("4", 1) if raised else _dec("4", 0),
        "downtime_good_percentage": _dec("99", -2), "downtime_bad_percentage": _dec("99", -2),
        "downtime_h_threshold": _dec("1", 9), "downtime_reputation_preserve": _dec("0", 0),
        "quick_failure_threshold": _dec("1", -6), "binom_test_p0": _dec("1", -1),
        "claim_validation_enabled": False, "logprobs_mode": "processed_logprobs",
    }


def params_json(net: Devnet, height: int | None = None) -> dict[str, Any]:
    """``QueryParamsResponse`` at ``height`` (None: the tip). The parameter groups the indexer reads have
    mainnet's field sets; the others (poc, tokenomics, collateral, …) are left out."""
    import hashlib

    cfg = net.scenario.config
    height = net.latest_height() if height is None else height
    version = cfg.protocol_version
    escrow_params = {
        "min_amount": "1000000000", "max_amount": "100000000000", "max_escrows_per_epoch": 500000,
        "group_size": cfg.group_size, "allowed_creator_addresses": [], "token_price": str(cfg.token_price),
        "approved_versions": [{"name": version, "binary": f"https://example.invalid/devshard-{version}.zip",
                               "sha256": hashlib.sha256(version.encode()).hexdigest()}],
        "max_nonce": cfg.max_nonce, "devshard_requests_enabled": True,
        "default_inference_seal_grace_nonces": cfg.seal_grace_nonces,
        "default_inference_seal_grace_seconds": cfg.seal_grace_seconds, "create_devshard_fee": str(cfg.create_fee),
        "fee_per_nonce": str(cfg.fee_per_nonce), "refusal_timeout": str(cfg.refusal_timeout),
        "execution_timeout": str(cfg.execution_timeout), "validation_rate": cfg.validation_rate,
        "vote_threshold_factor": cfg.vote_threshold_factor, "default_auto_seal_every_n_nonces": cfg.auto_seal_every,
    }
    epoch_params = {
        "epoch_length": str(cfg.blocks_per_epoch), "epoch_multiplier": "1", "epoch_shift": "0",
        "default_unit_of_compute_price": "100", "poc_stage_duration": "60", "poc_exchange_duration": "0",
        "poc_validation_delay": "5", "poc_validation_duration": "240", "set_new_validators_delay": "120",
        "inference_validation_cutoff": "2", "inference_pruning_epoch_threshold": "2",
        "inference_pruning_max": "5000", "poc_pruning_max": "1000", "poc_slot_allocation": _dec("1", -1),
        "confirmation_poc_safety_window": "500",
    }
    bitcoin = {"use_bitcoin_rewards": True, "initial_epoch_reward": "323000000000000",
               "decay_rate": _dec("-475", -6), "genesis_epoch": "1", "utilization_bonus_factor": _dec("5", -1),
               "full_coverage_bonus_factor": _dec("12", -1), "partial_coverage_bonus_factor": _dec("1", -1)}
    # mainnet's values (the e267 and e366 captures): a delegating host passes 5 % of its reward weight on
    delegation = {"deploy_window": "500", "refusal_penalty": _dec("1", -1), "no_participation_penalty": _dec("15", -2),
                  "delegation_share": _dec("5", -2), "w_threshold": _dec("1", -1), "v_min": "3",
                  "cap_factor": _dec("75", -2), "initial_model_id": MODELS[0].model_id,
                  "max_model_voting_power_percentage": _dec("3", -1)}
    return {"params": {"epoch_params": epoch_params, "validation_params": validation_params(net, height),
                       "bitcoin_reward_params": bitcoin, "devshard_escrow_params": escrow_params,
                       "delegation_params": delegation}}


def epoch_info_json(net: Devnet) -> dict[str, Any]:
    """``QueryEpochInfoResponse {block_height, params (the whole Params), latest_epoch}``."""
    start = net.scenario.epoch_start(net.current_epoch)[0]
    return {"block_height": str(net.latest_height()), "params": params_json(net)["params"],
            "latest_epoch": {"index": str(net.current_epoch), "poc_start_block_height": str(start)}}


def _weights(net: Devnet) -> list[dict[str, Any]]:
    return [{"member_address": h.address, "weight": str(100000 + 37000 * h.index), "reputation": 100,
             "ml_nodes": [], "confirmation_weight": str(90000 + 37000 * h.index),
             "voting_power": str(100000 + 37000 * h.index)} for h in net.scenario.hosts]


def end_height(net: Devnet, epoch_index: int) -> int:
    """The last block of an ended epoch (0 while it runs, as the chain's ``last_block_height``)."""
    if epoch_index >= net.current_epoch:
        return 0
    return net.scenario.epoch_start(epoch_index + 1)[0] - 1


def epoch_group_data_json(net: Devnet, epoch_index: int, model_id: str | None) -> dict[str, Any] | None:
    """Root group (``model_id == ""`` + ``sub_group_models``) or one model sub-group; None = not found."""
    from indexer.devnet.chainviews import model_snapshot_json

    epoch = net.scenario.epoch(epoch_index)
    if epoch is None or epoch_index > net.current_epoch:
        return None
    models = [m.model_id for m in epoch.models]
    if model_id and model_id not in models:
        return None
    weights = _weights(net)
    group = {
        "confirmation_weight_scales": [], "effective_block_height": str(epoch.start_height + 60),
        "epoch_group_id": str(4 + epoch_index * 4), "epoch_index": str(epoch_index), "epoch_policy": "",
        "last_block_height": str(end_height(net, epoch_index)), "member_seed_signatures": [],
        "model_id": model_id or "", "model_snapshot": None, "number_of_requests": "0",
        "poc_start_block_height": str(epoch.start_height), "previous_epoch_requests": "0",
        "sub_group_models": [] if model_id else models, "total_throughput": "0",
        "total_weight": str(sum(int(w["weight"]) for w in weights)), "unit_of_compute_price": "100",
        # the root group's snapshot of the validation params in force at the epoch's start
        "validation_params": validation_params(net, epoch.start_height), "validation_weights": weights,
    }
    if model_id:
        group.update(epoch_group_id=str(4 + epoch_index * 4 + 1 + models.index(model_id)),
                     effective_block_height="0", last_block_height="0", validation_params=None,
                     unit_of_compute_price="0", model_snapshot=model_snapshot_json(model_id))
    return {"epoch_group_data": group}


def _executed(net: Devnet, epoch_index: int) -> dict[str, dict[str, int]]:
    """Per participant: inferences it executed in the epoch, and how many of them ended validated."""
    return net.scenario.epoch_sums("executed", epoch_index, lambda e: _count_executed(net, e))


def _count_executed(net: Devnet, epoch_index: int) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    epoch = net.scenario.epoch(epoch_index)
    for esc in epoch.escrows if epoch else []:
        for rec in esc.state.records.values():
            acc = out.setdefault(esc.slots[rec.executor_slot], {"count": 0, "validated": 0})
            acc["count"] += 1
            acc["validated"] += rec.status == 4  # VALIDATED
    return out


def performance_summary_json(net: Devnet, epoch_index: int, participant: str) -> dict[str, Any] | None:
    """Exists once the epoch has ended, for every participant of the epoch; None = not found."""
    if epoch_index >= net.current_epoch or net.scenario.epoch(epoch_index) is None \
            or participant not in net.scenario.hosts_by_address:
        return None
    stats = net.scenario.host_epoch_stats(epoch_index).get(participant, {})
    done = _executed(net, epoch_index).get(participant, {"count": 0, "validated": 0})
    out = excluded_map(net, epoch_index)
    excluded = participant in out
    earned = 0 if excluded else 1000 * done["count"]
    weights = {w["member_address"]: int(w["weight"]) for w in _weights(net)}
    # empty confirmation_weight_scales: the effective weight is the full weight; the cap is over the ACTIVE ones
    cap = payouts.power_cap([w for addr, w in weights.items() if addr not in out])
    weight = weights[participant] if cap is None else min(weights[participant], cap)
    rewarded = payouts.rewarded_coins(epoch_index, weight, sum(weights.values()),
                                      params_json(net)["params"]["bitcoin_reward_params"], active=not excluded,
                                      downtime_passes=downtime_verdicts(net, epoch_index)[participant])
    return {"epochPerformanceSummary": {
        "epoch_index": str(epoch_index), "participant_id": participant, "inference_count": str(done["count"]),
        "missed_requests": str(stats.get("missed", 0)), "earned_coins": str(earned),
        "rewarded_coins": str(rewarded), "burned_coins": "0", "validated_inferences": str(done["validated"]),
        "invalidated_inferences": str(stats.get("invalid", 0)), "claimed": not excluded}}


def downtime_verdicts(net: Devnet, epoch_index: int) -> dict[str, bool]:
    """Per participant: whether the chain's downtime test lets it be paid, over the counts its
    epoch_performance_summary publishes and the governance binom_test_p0 in force when the epoch settles."""
    stats, done = net.scenario.host_epoch_stats(epoch_index), _executed(net, epoch_index)
    counts = {h.address: (stats.get(h.address, {}).get("missed", 0), done.get(h.address, {}).get("count", 0))
              for h in net.scenario.hosts}
    p0 = validation_params(net, end_height(net, epoch_index))["binom_test_p0"]
    return downtime.downtime_verdicts(counts, downtime.governance_permille(p0))


def excluded_map(net: Devnet, epoch_index: int) -> dict[str, int]:
    """The host with the most invalidations (if any) is excluded for statistical invalidations, 100 blocks
    before the epoch's end."""
    if epoch_index >= net.current_epoch:
        return {}
    stats = net.scenario.host_epoch_stats(epoch_index)
    index = {h.address: h.index for h in net.scenario.hosts}  # ties go to the later host, as hostA < hostB < …
    worst = max(stats.items(), key=lambda kv: (kv[1]["invalid"], index[kv[0]]), default=None)
    if worst is None or worst[1]["invalid"] == 0:
        return {}
    return {worst[0]: end_height(net, epoch_index) - 100}


def excluded_participants_json(net: Devnet, epoch_index: int) -> dict[str, Any]:
    return {"items": [{"address": addr, "epoch_index": str(epoch_index), "reason": "statistical_invalidations",
                       "exclusion_block_height": str(height)}
                      for addr, height in sorted(excluded_map(net, epoch_index).items())]}

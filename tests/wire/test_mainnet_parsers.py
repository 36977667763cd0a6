"""Every chain-response parser on real mainnet responses (tests/cases/fixtures/mainnet/, byte for byte)."""
from __future__ import annotations

from decimal import Decimal

import pytest

from indexer.wire import chain_records as cr
from indexer.wire.normalize import NormalizeError, current_epoch, model_snapshot_record, parse_decimal
from tests.support.mainnet_fixtures import epoch_info_shape, load, structure_diff

ROOT_267 = "epoch_group_data_267.json"
KIMI_267 = "epoch_group_data_267_model_moonshotai_Kimi-K2.6.json"


def test_epoch_info_real_shape_gives_the_epoch_length():
    info = epoch_info_shape()
    assert current_epoch(info) == 367
    assert cr.epoch_info_parts(info) == (367, 5648400, 15391, 5660000)


def test_epoch_info_flattened_shape_still_reads():
    flat = {"block_height": "10", "params": {"epoch_length": "100"},
            "latest_epoch": {"index": "4", "poc_start_block_height": "5"}}
    assert cr.epoch_info_parts(flat) == (4, 5, 100, 10)


def test_root_group_267_epoch_heights_weights_models():
    group = cr.root_group(load(ROOT_267), 267)
    assert cr.epoch_record_from_group(group) == {"kind": "epoch", "epoch_index": 267, "start_height": 4120752,
                                                 "end_height": 4136542}
    assert cr.sub_group_models(group) == ["Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "moonshotai/Kimi-K2.6"]
    weights = cr.validation_weights(group)
    assert len(weights) == 51
    assert weights["gonka12pcu9mcrpa4w4sjd9y3dsksnvu495ss6f9r4ra"] == {"weight": 13120, "confirmation_weight": 11087}
    assert model_snapshot_record(load(ROOT_267)) is None  # the root group has no snapshot of its own
    with pytest.raises(NormalizeError, match="answered epoch 267"):
        cr.root_group(load(ROOT_267), 268)


def test_model_group_267_snapshot():
    rec = model_snapshot_record(load(KIMI_267))
    assert rec == {"kind": "model_snapshot", "epoch_index": 267, "model_id": "moonshotai/Kimi-K2.6",
                   "model_args": ["--max-model-len", "240000", "--tool-call-parser", "kimi_k2",
                                  "--reasoning-parser", "kimi_k2"],
                   "validation_threshold": Decimal("0.920")}
    with pytest.raises(NormalizeError, match="expected the root group"):
        cr.root_group(load(KIMI_267), 267)
    assert cr.epoch_heights(load(KIMI_267)["epoch_group_data"]) == (4120752, None)  # "0" = not set


def test_epoch_params_from_root_group_and_params_at_height():
    group = cr.root_group(load(ROOT_267), 267)
    rec = cr.epoch_params_record(267, group, load("params_e267.json"), 4136542, True)
    vp = rec["validation_params"]
    assert vp == group["validation_params"]  # kept as published
    assert parse_decimal(vp["invalidation_h_threshold"]) == Decimal("4")
    assert parse_decimal(vp["binom_test_p0"]) == Decimal("0.1")
    assert rec["total_weight"] == 541415 and rec["params_height"] == 4136542 and rec["params_exact"] is True
    assert rec["bitcoin_reward_params"]["initial_epoch_reward"] == "323000000000000"
    assert rec["devshard_escrow_params"]["approved_versions"][0]["name"] == "v1"


def test_live_params_after_proposal_96_differ_from_the_epoch_snapshot():
    """The live params captured later carry invalidation_h_threshold 40 ({4, exponent 1}) and 0.18; the epoch's
    root group keeps what was in force (4 and 0.1): live values are not the epoch's parameters."""
    live = load("params_e366.json")["params"]
    assert parse_decimal(live["validation_params"]["invalidation_h_threshold"]) == Decimal("40")
    assert parse_decimal(live["validation_params"]["bad_participant_invalidation_rate"]) == Decimal("0.18")
    rec = cr.epoch_params_record(267, cr.root_group(load(ROOT_267), 267), load("params_e366.json"), 5660000, False)
    assert parse_decimal(rec["validation_params"]["invalidation_h_threshold"]) == Decimal("4")
    esc = rec["devshard_escrow_params"]
    assert (esc["validation_rate"], esc["vote_threshold_factor"], esc["execution_timeout"]) == (1000, 50, "1920")
    assert rec["params_exact"] is False


@pytest.mark.parametrize("name,epoch,participant,expected", [
    ("epoch_performance_summary_267_gonka10mmdjau4dnj8krs7sh7t7635ttnmq9u3vqgz09.json", 267,
     "gonka10mmdjau4dnj8krs7sh7t7635ttnmq9u3vqgz09",
     {"inference_count": 17344, "missed_requests": 1, "validated_inferences": 17341, "invalidated_inferences": 0,
      "earned_coins": 3364823515, "rewarded_coins": 11328327247983, "burned_coins": 0}),
    ("epoch_performance_summary_366_gonka1scskt6wpnjnumsah6kjphmdu87vjgvcxmn4rxv.json", 366,
     "gonka1scskt6wpnjnumsah6kjphmdu87vjgvcxmn4rxv",
     {"inference_count": 14416, "missed_requests": 242, "validated_inferences": 13548, "invalidated_inferences": 868,
      "earned_coins": 0, "rewarded_coins": 0, "burned_coins": 0}),
])
def test_performance_summary(name, epoch, participant, expected):
    assert cr.performance_summary(load(name), epoch, participant) == expected
    with pytest.raises(NormalizeError, match="answered for"):
        cr.performance_summary(load(name), epoch, "gonka1someoneelse")


def test_excluded_participants_366():
    ex = cr.excluded_participants(load("excluded_participants_366.json"), 366)
    assert len(ex) == 7
    assert ex["gonka1scskt6wpnjnumsah6kjphmdu87vjgvcxmn4rxv"] == {"excluded_reason": "statistical_invalidations",
                                                                  "excluded_height": 5652288}
    assert cr.excluded_participants(load("excluded_participants_366.json"), 367) == {}  # other epoch's items


def test_participant_epoch_records_merge_the_three_sources():
    weights = {"gonka1a": {"weight": 5, "confirmation_weight": 4}}
    summaries = {"gonka1a": {"inference_count": 3}, "gonka1b": {"inference_count": 1}}
    excluded = {"gonka1b": {"excluded_reason": "failed_confirmation_poc", "excluded_height": 9}}
    assert cr.participant_epoch_records(366, weights, summaries, excluded) == [
        {"kind": "participant_epoch", "epoch_index": 366, "participant": "gonka1a", "weight": 5,
         "confirmation_weight": 4, "inference_count": 3},
        {"kind": "participant_epoch", "epoch_index": 366, "participant": "gonka1b", "inference_count": 1,
         "excluded_reason": "failed_confirmation_poc", "excluded_height": 9}]


def test_structure_diff_sees_what_the_devnet_got_wrong():
    real = {"a": {"b": "1"}, "c": [{"d": 1}], "e": None}
    assert structure_diff(real, {"a": {"b": "1"}, "c": [{"d": 2}], "e": None}) == []
    assert structure_diff(real, {"a": {"b": 1}, "c": [], "x": 0}) == [
        "$.a.b: number where mainnet has string", "$.e: missing", "$.x: not in the mainnet response"]

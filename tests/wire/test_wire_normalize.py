"""Chain REST / host / RPC JSON → normalized records (fixtures F1, F3, F10, F11 of the reference)."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import pytest

from indexer.wire import (
    NormalizeError,
    dumps_record,
    escrow_record,
    host_epoch_stats_record,
    host_stats_records,
    model_snapshot_record,
)
from indexer.wire.normalize import current_epoch, epoch_record, parse_decimal, parse_u64, participant_inference_url
from indexer.wire.rpc import latest_block_height, tx_search_events, tx_search_total

F1 = {"epoch_group_data": {
    "poc_start_block_height": "2450000", "epoch_group_id": "412", "epoch_index": "408",
    "model_id": "deepseek-ai/DeepSeek-V4-Flash-0731", "sub_group_models": [], "total_weight": "1250000",
    "model_snapshot": {
        "proposed_by": "gonka1govauthority", "id": "deepseek-ai/DeepSeek-V4-Flash-0731",
        "units_of_compute_per_token": "1000", "context_window": "400000", "quantization": "fp8",
        "model_args": ["--max-model-len", "400000", "--kv-cache-dtype", "fp8", "--trust-remote-code"],
        "v_ram": "640", "throughput_per_nonce": "1000", "validation_threshold": {"value": "97", "exponent": -2}}}}

F3 = {"escrow": {
    "id": "1971", "creator": "gonka1gatewayuser", "amount": "5000000000",
    "slots": ["gonka1hostA"] * 4 + ["gonka1hostB"] * 2 + ["gonka1hostC"] * 3 + ["gonka1hostD"] * 2 + ["gonka1hostE"] * 5,
    "epoch_index": "408", "app_hash": "9f2c", "settled": False, "token_price": "10",
    "model_id": "deepseek-ai/DeepSeek-V4-Flash-0731", "create_devshard_fee": "10000", "fee_per_nonce": "1000",
    "inference_seal_grace_nonces": 160, "inference_seal_grace_seconds": 3600, "auto_seal_every_n_nonces": 150,
    "validation_rate": 1000, "vote_threshold_factor": 50, "logprobs_mode": "processed_logprobs"},
    "found": True}

F10 = {"stats": {"participant": "gonka1hostB", "epoch_index": "408", "missed": 1, "invalid": 1, "cost": "912345670",
                 "required_validations": 40, "completed_validations": 38, "escrow_count": 3}, "found": True}

F11 = {"escrow_id": "1971", "epoch_id": 408, "nonce": 6210, "version": "v7", "state_root_and_protocol_version": "v7",
       "cached_at": 1790813400, "cache_ttl_seconds": 60,
       "host_stats": {"5": {"missed": 1, "invalid": 1, "cost": 310000000, "required_validations": 10,
                            "completed_validations": 9},
                      "3": {"missed": 1, "invalid": 0, "cost": 120000000, "required_validations": 12,
                            "completed_validations": 12}},
       "group": [{"SlotID": 3, "ValidatorAddress": "gonka1hostA"}, {"SlotID": 5, "ValidatorAddress": "gonka1hostB"}]}


def test_f1_model_snapshot():
    rec = model_snapshot_record(F1)
    assert rec == {"kind": "model_snapshot", "epoch_index": 408, "model_id": "deepseek-ai/DeepSeek-V4-Flash-0731",
                   "model_args": F1["epoch_group_data"]["model_snapshot"]["model_args"],
                   "validation_threshold": Decimal("0.97")}
    assert isinstance(rec["validation_threshold"], Decimal)


def test_root_group_has_no_snapshot():
    assert model_snapshot_record({"epoch_group_data": {"epoch_index": "408", "model_id": "",
                                                       "sub_group_models": ["a", "b"]}}) is None


def test_f3_escrow():
    rec = escrow_record(F3, protocol_version="v7")
    assert rec == {"kind": "escrow", "escrow_id": "1971", "epoch_index": 408,
                   "model_id": "deepseek-ai/DeepSeek-V4-Flash-0731", "slots": F3["escrow"]["slots"],
                   "vote_threshold_factor": 50, "creator": "gonka1gatewayuser", "validation_rate": 1000,
                   "amount": 5000000000, "token_price": 10, "create_devshard_fee": 10000, "fee_per_nonce": 1000,
                   "inference_seal_grace_nonces": 160, "inference_seal_grace_seconds": 3600,
                   "auto_seal_every_n_nonces": 150, "protocol_version": "v7", "settled": False}


def test_escrow_session_config_feeds_the_session_inputs():
    # the poller's escrow record is what the verification replays from: every input read, none guessed
    from indexer.verify.inputs import SessionInputs, session_inputs
    inputs = session_inputs(escrow_record(F3, protocol_version="v4.1"))
    assert isinstance(inputs, SessionInputs)
    assert (inputs.creator, inputs.balance, inputs.config.create_fee, inputs.config.fee_per_nonce,
            inputs.config.seal_grace_nonces, inputs.config.seal_grace_seconds, inputs.config.auto_seal_every) == (
        "gonka1gatewayuser", 5000000000, 10000, 1000, 160, 3600, 150)


def test_escrow_config_absent_is_not_captured_and_zero_is_kept():
    older = {k: v for k, v in F3["escrow"].items() if k not in ("creator", "inference_seal_grace_nonces")}
    rec = escrow_record({"escrow": {**older, "fee_per_nonce": "0"}, "found": True}, protocol_version="v4.1")
    assert "creator" not in rec and "inference_seal_grace_nonces" not in rec and rec["fee_per_nonce"] == 0
    from indexer.verify.inputs import session_inputs
    assert session_inputs(rec) == "escrow 1971: not captured: creator, inference_seal_grace_nonces"


def test_escrow_max_nonce_and_timeouts_as_published():
    data = {"escrow": {**F3["escrow"], "max_nonce": 1000000, "refusal_timeout": "60", "execution_timeout": "1920"},
            "found": True}
    rec = escrow_record(data)
    assert (rec["max_nonce"], rec["refusal_timeout"], rec["execution_timeout"]) == (1000000, 60, 1920)
    assert "execution_timeout" not in escrow_record(F3)  # absent: not captured, not zero
    with pytest.raises(NormalizeError, match="execution_timeout: expected an int64, got '1.5'"):
        escrow_record({"escrow": {**F3["escrow"], "execution_timeout": "1.5"}, "found": True})


def test_escrow_creator_of_another_type_is_refused():
    with pytest.raises(NormalizeError, match="creator: expected an address string, got int"):
        escrow_record({"escrow": {**F3["escrow"], "creator": 7}, "found": True})


@pytest.mark.parametrize("value", ["400000", 400000])
def test_escrow_max_model_len_string_or_number(value):
    data = {"escrow": {**F3["escrow"], "max_model_len": value}, "found": True}
    assert escrow_record(data)["max_model_len"] == 400000


def test_escrow_zero_max_model_len_means_unknown_and_pruned_is_none():
    assert "max_model_len" not in escrow_record({"escrow": {**F3["escrow"], "max_model_len": "0"}})
    assert escrow_record({"found": False}) is None
    assert escrow_record({"escrow": None, "found": False}) is None  # the gateway's rendering of a nil escrow


def test_escrow_zero_validation_rate_is_the_default_not_a_rate():
    # devshard_escrow.proto: "Zero values fall back to compiled defaults"; builds before the field send nothing
    assert "validation_rate" not in escrow_record({"escrow": {**F3["escrow"], "validation_rate": 0}})
    assert "validation_rate" not in escrow_record({"escrow": {k: v for k, v in F3["escrow"].items()
                                                              if k != "validation_rate"}})


def test_f10_host_epoch_stats():
    assert host_epoch_stats_record(F10) == {
        "kind": "host_epoch_stats", "epoch_index": 408, "participant": "gonka1hostB", "missed": 1, "invalid": 1,
        "cost": 912345670, "required_validations": 40, "completed_validations": 38, "escrow_count": 3}
    assert host_epoch_stats_record({"found": False}) is None
    # newer builds add uint32 settlement counters (keeper/devshard_host_stats.go): kept, not dropped
    newer = host_epoch_stats_record({"stats": {**F10["stats"], "validated": 30, "finished": 41}, "found": True})
    assert (newer["validated"], newer["finished"]) == (30, 41)


def test_f11_host_stats_per_slot_sorted():
    recs = host_stats_records(F11)
    assert [r["slot_id"] for r in recs] == [3, 5]
    assert recs[1] == {"kind": "host_stats", "escrow_id": "1971", "slot_id": 5, "missed": 1, "invalid": 1,
                       "cost": 310000000, "required_validations": 10, "completed_validations": 9}


def test_scalars_never_float():
    assert parse_u64("18446744073709551615") == 2**64 - 1
    for bad in (1.0, True, "-1", "1e3", None, str(2**64)):
        with pytest.raises(NormalizeError):
            parse_u64(bad)
    assert parse_decimal({"value": "5", "exponent": -2}) == Decimal("0.05")
    assert parse_decimal("0.970000000000000000") == Decimal("0.97")
    with pytest.raises(NormalizeError):
        parse_decimal({"value": "x", "exponent": 0})


def test_dumps_record_keeps_decimals_exact():
    line = dumps_record(model_snapshot_record(F1))
    assert json.loads(line)["validation_threshold"] == "0.97"


def test_epoch_and_participant_helpers():
    info = {"block_height": "2451000", "latest_epoch": {"index": "408", "poc_start_block_height": "2450000"}}
    assert current_epoch(info) == 408 and current_epoch({"epoch": "409"}) == 409
    assert epoch_record(info) == {"kind": "epoch", "epoch_index": 408, "start_height": 2450000}
    assert participant_inference_url({"participant": {"inference_url": "http://h:8000/"}}) == "http://h:8000"
    with pytest.raises(NormalizeError):
        participant_inference_url({"participant": {}})


def _rpc(attrs_b64: bool) -> dict:
    pairs = {"escrow_id": "1971", "creator": "gonka1gatewayuser", "amount": "5000000000", "epoch_index": "408",
             "model_id": "deepseek-ai/DeepSeek-V4-Flash-0731", "fees": "5"}
    enc = (lambda s: base64.b64encode(s.encode()).decode()) if attrs_b64 else (lambda s: s)
    event = {"type": "devshard_escrow_created", "attributes": [{"key": enc(k), "value": enc(v)} for k, v in pairs.items()]}
    failed = {"hash": "BB", "height": "11", "tx_result": {"code": 5, "events": [event]}}
    ok = {"hash": "AA", "height": "10", "tx_result": {"code": 0, "events": [{"type": "message", "attributes": []}, event]}}
    return {"jsonrpc": "2.0", "id": -1, "result": {"txs": [ok, failed], "total_count": "2"}}, pairs


@pytest.mark.parametrize("attrs_b64", [False, True])
def test_tx_search_events_plain_and_base64(attrs_b64):
    data, pairs = _rpc(attrs_b64)
    events = tx_search_events(data, "devshard_escrow_created")
    assert len(events) == 1  # the failed tx is ignored
    assert events[0].attributes == pairs and events[0].height == 10 and events[0].tx_hash == "AA"
    assert tx_search_total(data) == 2


def test_rpc_errors_and_status():
    with pytest.raises(NormalizeError, match="page should be"):
        tx_search_events({"jsonrpc": "2.0", "error": {"code": -32603, "message": "Internal error",
                                                      "data": "page should be within [1, 1] range, given 2"}})
    assert latest_block_height({"result": {"sync_info": {"latest_block_height": "2451000"}}}) == 2451000

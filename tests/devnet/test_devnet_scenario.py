"""The devnet scenario: determinism, coverage of the #2078 situations, and self-consistent truth."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from indexer.devnet import Scenario, ScenarioConfig
from indexer.devnet.models import DEEPSEEK, GLM, MINIMAX, MODELS_BY_ID, max_model_len, merge_model_args
from indexer.devnet.state import STATUS_NAMES, EscrowState, vote_threshold
from indexer.wire import decode_diff, encode_diff, normalize_diffs


@pytest.fixture(scope="module")
def scn() -> Scenario:
    return Scenario()


def _labels(scn):
    return [(esc, iid, lab) for esc in scn.escrows.values() for iid, lab in esc.log.labels.items()]


# --------------------------------------------------------------------------- MergeModelArgs (§2.2)


@pytest.mark.parametrize("epoch,local,limit", [
    (["--max-model-len", "400000"], ["--max-model-len", "600000"], 400000),
    (["--max-model-len", "400000"], ["--max-model-len=600000"], 600000),
    (["--max-model-len=400000"], ["--max-model-len", "600000"], 600000),
    (["--max-model-len=400000"], ["--max-model-len=600000"], 600000),
])
def test_merge_model_args_table(epoch, local, limit):
    assert max_model_len(merge_model_args(epoch, local)) == limit


def test_governance_limits():
    assert {m: max_model_len(list(MODELS_BY_ID[m].model_args)) for m in MODELS_BY_ID} == {
        DEEPSEEK: 400000, MINIMAX: 180000, GLM: 400000}
    assert "--max-model-len=400000" in MODELS_BY_ID[GLM].model_args  # the one-token form


def test_hosts_mix_raised_and_governance(scn):
    limits = Counter(h.limit(MODELS_BY_ID[DEEPSEEK]) for h in scn.hosts)
    assert limits[600000] >= 2 and limits[400000] >= 2
    glm_only = [h for h in scn.hosts if h.role == "raised_glm_only"]
    assert glm_only and all(h.limit(MODELS_BY_ID[GLM]) == 600000 and h.limit(MODELS_BY_ID[DEEPSEEK]) == 400000
                            for h in glm_only)


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_network():
    a, b = Scenario(ScenarioConfig(seed=5, epochs=1)), Scenario(ScenarioConfig(seed=5, epochs=1))
    for eid in a.escrows:
        assert a.escrows[eid].roots == b.escrows[eid].roots
        assert a.tx_records(eid) == b.tx_records(eid)
    c = Scenario(ScenarioConfig(seed=6, epochs=1))
    assert [e.roots for e in a.escrows.values()] != [e.roots for e in c.escrows.values()]


def test_sizes_are_knobs():
    s = Scenario(ScenarioConfig(seed=1, epochs=2, escrows_per_epoch=3, inferences_per_escrow=10, hosts=8))
    assert len(s.epochs) == 2 and len(s.escrows) == 6 and len(s.hosts) == 8
    for esc in s.escrows.values():
        assert len(esc.slots) == 16 and 6 <= len(set(esc.slots)) <= 8
        assert sum(1 for r in esc.log.records if r["kind"] == "start") == 10
        assert esc.protocol_version == "v5"


# --------------------------------------------------------------------------- coverage


def test_prompts_around_the_limit(scn):
    totals = Counter()
    for esc, iid, lab in _labels(scn):
        gov, total = lab["governance_limit"], lab["prompt_tokens"] + lab["max_tokens"]
        totals["exact"] += total == gov
        totals["plus_one"] += total == gov + 1
        totals["prompt_over"] += lab["prompt_tokens"] >= gov
        totals["below"] += total < gov
    assert all(totals[k] > 0 for k in ("exact", "plus_one", "prompt_over", "below")), totals


def test_refusals_and_their_payloads(scn):
    families = set()
    for esc, iid, lab in _labels(scn):
        if lab.get("finish_kind") != "context_fault":
            continue
        payload = esc.log.payloads[iid]
        events = json.loads(payload)["events"]
        assert events[-1] == "data: [DONE]" and events[0].startswith("data: ")
        event = json.loads(events[0][len("data: "):])
        assert event["id"] == f"devshard-{esc.escrow_id}-{iid}"
        assert event["error"]["code"] == 400 and event["error"]["type"] == "BadRequestError"
        assert str(lab["executor_limit"]) in event["error"]["message"]  # the refusing host's own limit
        assert lab["prompt_tokens"] + lab["max_tokens"] > lab["executor_limit"]
        finish = next(r for r in esc.log.records if r["kind"] == "finish" and r["inference_id"] == iid)
        assert finish["input_tokens"] == finish["output_tokens"] == 0
        assert finish["response_hash"] == hashlib.sha256(payload.encode()).hexdigest()
        families.add(lab["family"])
    assert len(families) >= 3, families


def test_outcomes_cover_the_2078_paths(scn):
    statuses = Counter()
    applied_sibling_miss = rejected_miss = fits_refusals = raised_served = 0
    for esc, iid, lab in _labels(scn):
        statuses[lab["status"]] += 1
        if lab.get("error_miss_sibling") is not None and lab["status"] == "TimedOut":
            applied_sibling_miss += 1
        if "error_miss_sibling" in lab and lab["error_miss_sibling"] is None and lab["status"] == "Finished":
            rejected_miss += 1
        fits_refusals += lab["refused"] and lab["fits_governance"]
        raised_served += lab["case"] == "sibling" and lab["prompt_tokens"] + lab["max_tokens"] > lab["governance_limit"]
    assert statuses["Invalidated"] and statuses["Validated"] and statuses["TimedOut"], statuses
    assert applied_sibling_miss and rejected_miss and fits_refusals and raised_served
    reasons = Counter(r["reason"] for e in scn.escrows.values() for r in e.log.records if r["kind"] == "timeout")
    assert reasons["refused"] and reasons["execution"]


def test_challenge_votes_follow_the_voters_limits(scn):
    for esc, iid, lab in _labels(scn):
        if lab.get("finish_kind") != "context_fault":
            continue
        total = lab["prompt_tokens"] + lab["max_tokens"]
        for r in esc.log.records:
            if r["inference_id"] == iid and r["kind"] == "validation_vote":
                voter = scn.hosts_by_address[esc.slots[r["voter_slot"]]]
                assert r["vote_valid"] == (voter.limit(esc.model) < total)


# --------------------------------------------------------------------------- truth is derivable from the log


def _replay(esc):
    state = EscrowState(esc.slots, esc.vote_threshold_factor, esc.token_price)
    for diff in esc.diffs:
        wire = decode_diff(encode_diff(diff, esc.protocol_version), esc.protocol_version)
        for tx in wire["txs"]:
            (name, msg), = tx.items()
            state.apply(name, msg, wire["nonce"])
    state.settle()
    return state


def test_truth_is_reproduced_by_replaying_the_wire_log(scn):
    for esc in scn.escrows.values():
        state = _replay(esc)
        assert {i: STATUS_NAMES[r.status] for i, r in state.records.items()} == esc.statuses()
        for mine, truth in zip(state.stats, esc.state.stats):
            assert (mine.missed, mine.invalid, mine.cost, mine.completed_validations) == (
                truth.missed, truth.invalid, truth.cost, truth.completed_validations)


def test_expected_records_equal_normalized_wire_log(scn):
    for eid, esc in scn.escrows.items():
        diffs = [decode_diff(encode_diff(d, "v5"), "v5") for d in esc.diffs]
        out = normalize_diffs(eid, diffs, "v5", esc.log.payloads)
        assert out.records == scn.tx_records(eid)
        assert out.other["finalize_round"] == 1


def test_threshold_rule():
    assert vote_threshold(16, 50) == 8 and vote_threshold(16, 0) == 8 and vote_threshold(16, 60) == 9
    # the devnet keeps its own copy on purpose (independent ground truth): it must agree with the replay's
    from indexer.replay import machine

    assert all(vote_threshold(n, f) == machine.vote_threshold(n, f) for n in range(1, 33) for f in range(101))

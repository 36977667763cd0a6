"""The weight the chain pays an epoch reward on (fn.reward_weight, per chain version) and what the restitution view
makes of it, checked against the chain's own payouts.

Real captures: tests/cases/fixtures/mainnet/rewards_e265_e267/ holds, byte for byte, the root and model sub-group
epoch_group_data and every participant's epoch_performance_summary of mainnet epochs 265 and 267 (gonkalabs/
GRC-e267-kimi_shortfall @ 9e372ae7 output/raw_chain/, as copied in /work/shared/data/mainnet-e267). Both epochs
publish empty confirmation_weight_scales and ran chain v0.2.12: every host the chain paid (rewarded_coins > 0)
must get exactly its payout from the records the poller captures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.reports.restitution import collect, markdown
from indexer.reports.restitution.render import gonka
from indexer.wire import chain_records as cr
from indexer.wire.normalize import NormalizeError
from tests.support.rules_kit import load

DATA = Path(__file__).resolve().parents[1] / "cases" / "fixtures" / "mainnet" / "rewards_e265_e267"
PARAMS = Path(__file__).resolve().parents[1] / "cases" / "fixtures" / "mainnet" / "params_e267.json"
PREFIX = "chain_api_productscience_inference_inference_"


def _json(path: Path):
    return json.loads(path.read_text())


def epoch_records(epoch: int) -> list[dict]:
    """The epoch_params and participant_epoch records the poller's capture makes of the stored responses."""
    group = cr.root_group(_json(DATA / f"{PREFIX}epoch_group_data_{epoch}.json"), epoch)
    subs = [_json(p)["epoch_group_data"] for p in sorted(DATA.glob(f"{PREFIX}epoch_group_data_{epoch}_model_id_*"))]
    assert len(subs) == len(cr.sub_group_models(group)) == 2
    summaries = {}
    for p in sorted(DATA.glob(f"{PREFIX}epoch_performance_summary_{epoch}_*.json")):
        addr = p.stem.rsplit("_", 1)[1]
        summaries[addr] = cr.performance_summary(_json(p), epoch, addr)
    weights = cr.validation_weights(group)
    raw = cr.raw_confirmation_weights(subs)
    assert set(raw) == set(weights)  # every host of the root group has sub-group rows
    params = cr.epoch_params_record(epoch, group, _json(PARAMS), None, False)
    assert params["confirmation_weight_scales"] == {}  # published empty in both epochs
    return [params, *cr.participant_epoch_records(epoch, weights, summaries, {}, raw)]


def test_real_payouts_equal_the_v0212_weight_rule(db_url, tmp_path, conn):
    conn.execute("INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason) "
                 "VALUES (265, 267, 'v0.2.12', 'test: mainnet epochs 265-267 ran v0.2.12')")
    load(db_url, tmp_path, epoch_records(265) + epoch_records(267), rules=False)
    rows = conn.execute(
        "SELECT epoch_index, participant, chain_rewarded_coins, reward_if_passed, reward_at_stake, weight_basis, "
        "confirmation_weight, weight, raw_confirmation_weight, reward_if_full_weight, zero_confirmation_weight "
        "FROM api.restitution_impact WHERE epoch_index IN (265, 267) ORDER BY 1, 2").fetchall()
    assert len(rows) == 102
    paid = [r for r in rows if r[2] > 0]
    assert len(paid) == 85
    wrong = [(e, p, chain, mine, basis) for e, p, chain, mine, _, basis, *_ in paid if chain != mine]
    assert wrong == []
    assert all(r[3] == r[4] for r in rows)  # reward_at_stake is the same figure
    # the downtime outcomes match: every host the chain paid passes the downtime test as the view computes it
    downtime = dict(((e, p), ok) for e, p, ok in conn.execute(
        "SELECT epoch_index, participant, downtime_passes FROM api.restitution_impact").fetchall())
    assert [(e, p) for e, p, *_ in paid if downtime[(e, p)] is not True] == []
    assert {r[5] for r in paid} == {"confirmation_capped", "confirmation_rescaled"}
    # the power cap (v0.2.12: headcount of the ACTIVE list, zero effective weights included) binds on no host there
    assert conn.execute("SELECT count(power_cap), bool_and(power_cap_may_bind IS FALSE), count(reward_weight_error) "
                        "FROM api.restitution_impact WHERE epoch_index IN (265, 267)").fetchone() == (0, True, 0)
    # the confirmation weight alone is not the chain's rule: its share differs from 72 of the 85 payouts
    alone = conn.execute("SELECT count(*) FILTER (WHERE fn.reward_share(theoretical_epoch_reward, "
                         "confirmation_weight, total_weight) <> chain_rewarded_coins) FROM api.restitution_impact "
                         "WHERE chain_rewarded_coins > 0").fetchone()[0]
    assert alone == 72
    share = conn.execute("SELECT fn.theoretical_epoch_reward(267, 323000000000000, -0.000475, 1)").fetchone()[0]
    assert share == 284_661_946_392_231
    # hand-checked: gonka1…qgr5 in 267: weight 9,647 < raw 34,581, so 19,294 x 9,647 / 34,581 = 5,382 (truncated);
    # 5,382 x 284,661,946,392,231 / 541,415 = 2,829,715,828,861 ngonka, what the chain paid
    r = next(r for r in rows if r[0] == 267 and r[1].endswith("s9qgr5"))
    assert r[5:9] == ("confirmation_rescaled", 19294, 9647, 34581) and r[2] == r[3] == 2_829_715_828_861
    # a host with confirmation weight 0 is flagged, with what its full weight would have paid
    z = next(r for r in rows if r[0] == 267 and r[1].endswith("mwtwq2"))
    assert z[6] == 0 and z[3] == 0 and z[10] is True and z[9] == 1124 * 284_661_946_392_231 // 541_415
    (case,) = collect(db_url, (267, 267))
    text = markdown(case)
    assert "Hosts with confirmation weight 0" in text
    assert ("of the 48 hosts the chain paid in this epoch (epoch_performance_summary.rewarded_coins), the rule "
            "gives exactly the amount paid for 48.") in text
    assert f"| `{z[1]}` | 1,124 | confirmation\\_rescaled | 0.000000 | {gonka(z[9])} |" in text


@pytest.mark.parametrize("args, expected", [
    # v0.2.12: weight >= raw -> min(cw, w); weight < raw -> floor(cw * w / raw)
    ((13120, 11087, 12130, None, "v0.2.12"), (11087, "confirmation_capped", None)),
    ((776, 912, 912, None, "v0.2.12"), (776, "confirmation_rescaled", None)),
    ((9647, 19294, 34581, None, "v0.2.12"), (5382, "confirmation_rescaled", None)),
    ((10, 1, 3, None, "v0.2.12"), (1, "confirmation_capped", None)),
    ((10, 1, 3, {"m": {}}, "v0.2.18"), (3, "confirmation_rescaled", None)),
    ((0, 5, 5, None, "v0.2.12"), (0, "full", None)),
    # v0.2.13 on: empty scales -> full weight; scales -> rescaled, at most the weight; raw 0 -> 0
    ((9647, 19294, 34581, {}, "v0.2.13"), (9647, "full", None)),
    ((100, 30, 50, {"m": {"weight_scale_factor": {"value": "1", "exponent": 0}}}, "v0.2.18"),
     (60, "confirmation_rescaled", None)),
    ((100, 80, 50, {"m": {}}, "v0.2.18"), (100, "confirmation_rescaled", None)),
    ((100, 80, 0, {"m": {}}, "v0.2.18"), (0, "confirmation_rescaled", None)),
    ((100, -4, 50, {"m": {}}, "v0.2.18"), (0, "confirmation_rescaled", None)),
])
def test_reward_weight_rules(conn, args, expected):
    w, cw, raw, scales, version = args
    got = conn.execute("SELECT * FROM fn.reward_weight(%s, %s, %s, %s::jsonb, %s)",
                       (w, cw, raw, None if scales is None else json.dumps(scales), version)).fetchone()
    assert got == expected


@pytest.mark.parametrize("args, message", [
    ((100, 50, 80, None, "v0.2.11"), "the reward weight rule of chain v0.2.11 is not reproduced"),
    ((100, 50, None, None, "v0.2.12"), "no raw confirmation weight captured"),
    ((100, 50, 80, None, "v0.2.16"), "no confirmation_weight_scales captured"),
    ((None, 50, 80, {}, "v0.2.16"), "no weight captured"),
    ((100, None, 80, {"m": {}}, "v0.2.16"), "no confirmation_weight captured"),
    ((100, 50, 80, {}, "v9.9.9"), "unknown chain version v9.9.9"),
])
def test_reward_weight_unknown_inputs_say_what_is_missing(conn, args, message):
    w, cw, raw, scales, version = args
    weight, basis, error = conn.execute("SELECT * FROM fn.reward_weight(%s, %s, %s, %s::jsonb, %s)",
                                        (w, cw, raw, None if scales is None else json.dumps(scales),
                                         version)).fetchone()
    assert weight is None and basis is None and message in error


def test_capture_reads_scales_and_raw_weights():
    group = {"confirmation_weight_scales": [{"model_id": "a/b", "effective_coefficient": {"value": "125",
                                                                                          "exponent": -2}}]}
    assert cr.confirmation_weight_scales(group) == {"a/b": {"effective_coefficient": {"value": "125",
                                                                                      "exponent": -2}}}
    assert cr.confirmation_weight_scales({}) is None
    assert cr.confirmation_weight_scales({"confirmation_weight_scales": []}) == {}
    with pytest.raises(NormalizeError, match="confirmation_weight_scales: expected an array"):
        cr.confirmation_weight_scales({"confirmation_weight_scales": {"a": 1}})
    with pytest.raises(NormalizeError, match=r"confirmation_weight_scales\[\]: model_id missing"):
        cr.confirmation_weight_scales({"confirmation_weight_scales": [{"effective_coefficient": "1"}]})
    subs = [{"validation_weights": [{"member_address": "h1", "confirmation_weight": "40"},
                                    {"member_address": "h2", "confirmation_weight": ""}]},
            {"validation_weights": [{"member_address": "h1", "confirmation_weight": "42"}]}]
    assert cr.raw_confirmation_weights(subs) == {"h1": 42}


def test_power_cap_lowers_the_heaviest_host(db_url, tmp_path, conn):
    # four ACTIVE hosts paid on full weight (newest chain, empty scales); one holds 70 percent: sorted
    # [10, 10, 10, 70], k=3: 70 > 0.3 x 100, cap = IntPart(0.3 x 30 / 0.7) = 12
    bitcoin = {"initial_epoch_reward": "323000000000000", "decay_rate": {"value": "-475", "exponent": -6},
               "genesis_epoch": "1"}
    recs = [{"kind": "epoch_params", "epoch_index": 500, "total_weight": 100, "bitcoin_reward_params": bitcoin,
             "confirmation_weight_scales": {}}]
    recs += [{"kind": "participant_epoch", "epoch_index": 500, "participant": f"gonka1host{k}", "weight": w,
              "confirmation_weight": w} for k, w in enumerate((70, 10, 10, 10))]
    load(db_url, tmp_path, recs, rules=False)
    rows = {r[0]: r[1:] for r in conn.execute(
        "SELECT participant, power_cap_may_bind, effective_weight, power_cap, reward_weight, reward_if_passed, "
        "theoretical_epoch_reward FROM api.restitution_impact WHERE epoch_index = 500").fetchall()}
    reward = rows["gonka1host0"][5]
    assert rows["gonka1host0"][:4] == (True, 70, 12, 12) and rows["gonka1host0"][4] == 12 * reward // 100
    for k in (1, 2, 3):
        assert rows[f"gonka1host{k}"][:4] == (False, 10, 12, 10) and rows[f"gonka1host{k}"][4] == 10 * reward // 100
    (case,) = collect(db_url, (500, 500))
    text = markdown(case)
    assert "Power cap: the chain caps the effective weights of the epoch's ACTIVE hosts" in text
    assert "| `gonka1host0` | 70 | 12 | 12 |" in text

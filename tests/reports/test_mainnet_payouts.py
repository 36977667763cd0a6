"""Every host's payout of mainnet epochs 265 and 267 recomputed against the chain's, and the published audit's
figures against ours.

Chain code read: gonka-ai/gonka inference-chain/x/inference/keeper/bitcoin_rewards.go, the stored revision with
CalculateParticipantBitcoinRewardsWithTransfers (and @577203ba for the older one): one list of effective weights of
the ACTIVE hosts is capped together (ApplyPowerCappingForWeights), a host whose status is not ACTIVE gets no reward
(and no work coins), the downtime test zeroes a weight after the cap, the denominator is the sum of full weights, and
the share is big.Int (weight x reward) / total, truncated.

Real captures: tests/cases/fixtures/mainnet/rewards_e265_e267/ (gonkalabs/GRC-e267-kimi_shortfall @ 9e372ae7
output/raw_chain/, copied in /work/shared/data/mainnet-e267). The audit's figures: RESTITUTION_REPORT.md,
BROADER_REVIEW.md and output/case3_broader_victim_count_recheck.csv of the same repository and commit."""
from __future__ import annotations

import json

import pytest

from indexer.reports.restitution import collect, markdown
from tests.reports.test_reward_weight import DATA, PREFIX, epoch_records
from tests.support.rules_kit import load

# the five rows the chain paid nothing although the captured weights, confirmation weights and downtime counts give
# them a share: the capture holds neither excluded_participants nor a participant status, and only a host excluded
# or of a status other than ACTIVE is paid nothing there. The audit shows a failed confirmation PoC for
# gonka1j7x6… in both epochs; the chain excludes such a host with reason failed_confirmation_poc (5 of the 7
# exclusions of the epoch-366 capture, tests/cases/fixtures/mainnet/excluded_participants_366.json)
NOT_ACTIVE = {(265, "gonka1cuwejs77gectp3n32wg8q27hlsa4m3hqspf4ww"),
              (265, "gonka1famtxh54kad6ylwtm60j6d7h6unpc08d4vdqnk"),
              (265, "gonka1j7x6dv42xehe9e5au4ku3wvzwtqlegfjhlvzj6"),
              (265, "gonka1ujnc662v6g69jm6fgxnr79a2m7ehzeut059239"),
              (267, "gonka1j7x6dv42xehe9e5au4ku3wvzwtqlegfjhlvzj6")}
J7X6 = "gonka1j7x6dv42xehe9e5au4ku3wvzwtqlegfjhlvzj6"
MYU0 = "gonka1myu058axjs62mc3e7na9krwvqpfl9z3gtcw9es"


def _records(extra: dict | None = None) -> list[dict]:
    recs = epoch_records(265) + epoch_records(267)
    for r in recs:
        if r["kind"] == "participant_epoch" and extra and (r["epoch_index"], r["participant"]) in extra:
            r.update(extra[(r["epoch_index"], r["participant"])])
    return recs


def _v0212(conn):
    conn.execute("INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason) "
                 "VALUES (265, 267, 'v0.2.12', 'test: mainnet epochs 265-267 ran v0.2.12')")


def test_every_host_of_epochs_265_and_267_is_paid_what_the_rule_gives(db_url, tmp_path, conn):
    _v0212(conn)
    load(db_url, tmp_path, _records(), rules=False)
    rows = conn.execute("SELECT epoch_index, participant, chain_rewarded_coins, payout_by_rule, "
                        "payout_by_rule_matches, downtime_passes, reward_weight, weight FROM api.restitution_impact "
                        "WHERE epoch_index IN (265, 267) ORDER BY 1, 2").fetchall()
    assert len(rows) == 102 and all(r[3] is not None for r in rows)
    unpaid = [r for r in rows if r[2] == 0]
    assert len(unpaid) == 17
    # 12 of the 17: the rule pays nothing too, confirmation PoC left them no confirmed weight (one of them also
    # fails the downtime test: 562 of 1,536 missed)
    assert sum(1 for r in unpaid if r[4]) == 12 and all(r[6] == 0 for r in unpaid if r[4])
    assert [(r[0], r[1]) for r in unpaid if r[5] is False] == [(265, "gonka1zsvl7ujlc8z3a35v2q6e3nml7ftyk23v76jqgl")]
    # the other 5: ACTIVE as far as the capture shows (no exclusions or status captured), downtime passed, a
    # positive capped weight; the chain paid them nothing, which it does only to a host excluded or not ACTIVE
    # (NOT_ACTIVE above)
    wrong = {(r[0], r[1]) for r in rows if not r[4]}
    assert wrong == NOT_ACTIVE
    assert all(r[3] > 0 and r[5] is True and r[6] > 0 for r in rows if (r[0], r[1]) in NOT_ACTIVE)
    # every host the chain paid: to the ngonka
    assert all(r[4] for r in rows if r[2] > 0)
    (case,) = collect(db_url, (267, 267))
    text = markdown(case)
    assert "Of the 3 hosts the chain paid nothing, the rule gives nothing to 2." in text
    assert f"| `{J7X6}` | 53,103,177,018 |" in text


@pytest.mark.parametrize("extra", [{"excluded_reason": "failed_confirmation_poc"}, {"status": "INVALID"}])
def test_an_exclusion_or_status_read_for_them_accounts_for_every_payout(db_url, tmp_path, conn, extra):
    # what the poller records from excluded_participants/{E} (or participant/{address}.status at the epoch's end):
    # with the five hosts excluded, or read as INVALID, the rule gives every one of the 102 rows exactly what the
    # chain paid, zeros included
    _v0212(conn)
    load(db_url, tmp_path, _records({k: extra for k in NOT_ACTIVE}), rules=False)
    rows = conn.execute("SELECT payout_by_rule_matches, chain_rewarded_coins, payout_by_rule FROM "
                        "api.restitution_impact WHERE epoch_index IN (265, 267)").fetchall()
    assert len(rows) == 102 and all(r[0] for r in rows)
    assert sum(r[1] for r in rows) == sum(r[2] for r in rows)


def test_the_audits_figures_against_ours(db_url, tmp_path, conn):
    """The audit's restitution (a confirmation PoC that should have passed) is the full-weight share: with the
    confirmation weight at the raw total, the v0.2.12 rule pays the full weight. Two differences, both explained:
    the audit's epoch-267 reward is 284,661,946,392,228 where the chain's is 284,661,946,392,231 (exp(decay)^266
    from the fixed table, PowInt32, truncated: every one of the 85 payouts confirms it), and the audit rounds a
    share to the nearest ngonka where the chain truncates (big.Int Div)."""
    _v0212(conn)
    load(db_url, tmp_path, _records(), rules=False)
    full = dict(((e, p), (f, c)) for e, p, f, c in conn.execute(
        "SELECT epoch_index, participant, reward_if_full_weight, chain_rewarded_coins FROM api.restitution_impact "
        "WHERE epoch_index IN (265, 267)").fetchall())
    assert conn.execute("SELECT fn.theoretical_epoch_reward(267, 323000000000000, -0.000475, 1)").fetchone()[0] \
        == 284_661_946_392_231
    # 19,518 / 541,415 x the reward: the audit's 10,262.057515369 GONKA, the same after truncation with either reward
    assert full[(267, J7X6)][0] == 10_262_057_515_369 == 19518 * 284_661_946_392_228 // 541415 + 1
    assert 19518 * 284_661_946_392_231 * 10 // 541415 == 102_620_575_153_691  # .1 past the integer: no rounding issue
    # epoch 265: 66,311 / 904,177: the audit's 20,896.527179100 GONKA exactly
    assert full[(265, J7X6)][0] == 20_896_527_179_100
    # 13,184 / 904,177: the exact quotient is ...514.90; the chain truncates to ...514, the audit rounds to ...515
    assert full[(265, MYU0)][0] == 4_154_662_338_514
    assert 13184 * 284_932_503_735_694 * 100 // 904177 == 415_466_233_851_490
    # the v0.2.12 rule with the confirmation weight at the raw total pays the full weight
    assert conn.execute("SELECT reward_weight FROM fn.reward_weight(19518, 65716, 65716, NULL, 'v0.2.12')"
                        ).fetchone()[0] == 19518
    # the audit's "full-weight reward gap" of the epoch-267 Kimi non-voters (6 decimals of GONKA): ours, to the ngonka
    gaps = {"gonka17gpuntq09zsaqtmpe544gc32tk4424dwv5t34f": "5737.771988",
            "gonka1zktn8j65wlys8a8e38hqhf4y3x6m4x04zskkrx": "2961.159336",
            "gonka168rtjfkszuhcggg4dfyse4yh7xn9zwfglnkns2": "5.257740",
            "gonka1kx9mca3xm8u8ypzfuhmxey66u0ufxhs7nm6wc5": "6.835062"}
    for who, gonka in gaps.items():
        f, paid = full[(267, who)]
        assert f"{(f - paid) // 1000:,}".replace(",", "") == gonka.replace(".", "")
    # the audit's zero-reward rows are the chain's: rewarded_coins 0 in its own summary files
    for e, who in ((267, J7X6), (265, J7X6), (265, MYU0)):
        summary = json.loads((DATA / f"{PREFIX}epoch_performance_summary_{e}_{who}.json").read_text())
        assert summary["epochPerformanceSummary"]["rewarded_coins"] == "0" == str(full[(e, who)][1])

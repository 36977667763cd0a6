"""Edge cases of the chain's money and penalty math: what gonka-ai/gonka's Go code gives at zero, one, ties, the
largest values, on errors and on unknown input, against the fn.* functions on a real PostgreSQL.

Each expected value is derived by hand from the Go code named beside it (integer math as Go does it: uint64 sums
wrap at 2^64, int() of a uint64 >= 2^63 is negative, int64 products wrap, big.Int.Int64() keeps the low 64 bits,
LegacyDec.TruncateInt64 truncates toward zero). Sources, gonka-ai/gonka inference-chain/x/inference/:
  keeper/accountsettle.go        CheckAndPunishForDowntime (stored revision with loadBitcoinRewardInputs)
  calculations/stats.go          MissedStatTest, MissedStatTestLookupWithP0, BinomialPValue
  keeper/bitcoin_rewards.go      CalculateParticipantBitcoinRewardsWithTransfers, delegationShareOfWeight,
                                 applyDelegationRewardPenalties / applyDelegationRewardTransfers (after PR #1378)
  types/params.go (Decimal)      ToLegacyDec = LegacyNewDecFromStr(decimal.String())
"""
from __future__ import annotations

import json
from decimal import Decimal

import psycopg
import pytest

NEWEST = "v0.2.18"
I63 = 2 ** 63 - 1          # the largest bigint / Go int64
SCALES = '{"Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": {"value": "1", "exponent": 0}}'


def one(conn, sql, *args):
    return conn.execute(sql, args).fetchone()


# ------------------------------------------------------------------ downtime: CheckAndPunishForDowntime

# (missed_requests, inference_count, p0, passes, the chain swallowed an error)
DOWNTIME = [
    # total = 0 keeps the reward before any test
    (0, 0, Decimal("0.1"), True, False),
    # one request, below the table's first row (n = 2): passes
    (0, 1, Decimal("0.1"), True, False),
    (1, 0, Decimal("0.1"), True, False),
    # p0 = 0.10 table, v0.2.10 on: n = 10 allows 4 misses; 5 fail (a tie at the critical value passes)
    (4, 6, Decimal("0.1"), True, False),
    (5, 5, Decimal("0.1"), False, False),
    # all missed, n = 10: fails
    (10, 0, Decimal("0.1"), False, False),
    # total = 2^63 - 1 fits Go int: n > 990, rule missed*10 <= total in int64. With every request missed the
    # product wraps to -10, so the chain passes a host that missed everything
    (I63, 0, Decimal("0.1"), True, False),
    (1, I63 - 1, Decimal("0.1"), True, False),
    # total = 2^63: int(total) is negative, MissedStatTest errors, the reward is kept
    (1, I63, Decimal("0.1"), True, True),
    # total = 2^64 - 2 (both counters at 2^63 - 1): int(total) = -2, error, kept
    (I63, I63, Decimal("0.1"), True, True),
    # governance p0 used directly (ceil permille > 500) at 1: not a table p0, BinomialPValue refuses p0 outside
    # (0, 1), the error keeps the reward
    (5, 5, Decimal("1"), True, True),
    # p0 = 0.6 (600 permille, no table): the binomial test; 10 of 10 missed is p = 0.6^10 < 0.05, fails
    (10, 0, Decimal("0.6"), False, False),
]


@pytest.mark.parametrize("missed, count, p0, passes, swallowed", DOWNTIME)
def test_downtime_check_is_check_and_punish_for_downtime(conn, missed, count, p0, passes, swallowed):
    got = one(conn, "SELECT passes, chain_error FROM fn.downtime_check(%s, %s, %s, %s)", missed, count, p0, NEWEST)
    assert got[0] is passes
    assert (got[1] is not None) is swallowed, got[1]
    if swallowed:
        assert got[1].endswith("the chain keeps the reward")


def test_downtime_check_keeps_unknown_unknown_and_refuses_what_no_chain_counter_holds(conn):
    assert one(conn, "SELECT passes FROM fn.downtime_check(NULL, 5, 0.1)")[0] is None
    assert one(conn, "SELECT passes FROM fn.downtime_check(1, NULL, 0.1)")[0] is None
    # p0 unknown: unknown, never "passes" (total = 0 still passes: the chain checks it before p0)
    assert one(conn, "SELECT passes FROM fn.downtime_check(1, 5, NULL)")[0] is None
    assert one(conn, "SELECT passes FROM fn.downtime_check(0, 0, NULL)")[0] is True
    for bad in ((-1, 5), (1, -5), (Decimal("1.5"), 5), (2 ** 64, 0)):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="counts must be uint64"):
            one(conn, "SELECT passes FROM fn.downtime_check(%s, %s, 0.1)", *bad)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown chain version"):
        one(conn, "SELECT passes FROM fn.downtime_check(1, 5, 0.1, 'v9.9.9')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="has no MissedStatTest"):
        one(conn, "SELECT passes FROM fn.downtime_check(1, 5, 0.1, 'v0.2.1')")


def test_downtime_outcome_reports_a_swallowed_error_as_a_pass_and_its_own_failures_as_unknown(conn):
    # epoch sums under the sample gate: p0 = the governance 0.10
    got = one(conn, "SELECT passes, p0, skipped, chain_error, error FROM fn.downtime_outcome(%s, %s, 10, 1, 1, 0.1)",
              I63, I63)
    assert got[:3] == (True, Decimal("0.100"), False) and got[3] and got[4] is None
    got = one(conn, "SELECT passes, chain_error, error FROM fn.downtime_outcome(-1, 5, 10, 1, 1, 0.1)")
    assert got[0] is None and got[1] is None and "counts must be uint64" in got[2]
    # the bigint form keeps its old contract: total = inference_count + missed
    assert one(conn, "SELECT passes, error FROM fn.downtime_outcome_safe(5, 10, 10, 1, 1, 0.1)") == (False, None)


# ------------------------------------------------------------------ reward weight (v0.2.13 on, scales non-empty)

# (weight, confirmation_weight, raw total, expected reward weight)
REWARD_WEIGHT = [
    (3, 2, 4, 1),                    # floor(2 * 3 / 4): truncation
    (100, 150, 100, 100),            # more confirmed than raw: capped at the full weight
    (100, -7, 100, 0),               # a negative confirmation weight counts as 0
    (100, 50, 0, 0),                 # raw total 0: nothing
    (1, 1, 1, 1),
    (I63, I63, I63, I63),            # the product needs big.Int, the quotient fits
    (I63 - 1, I63, I63, I63 - 1),    # a quotient of 2^63 - 1, capped at the weight
    # quotient 3 * (2^63 - 1), past int64: Int64() keeps 2^63 - 3, which the cap makes 3, the full weight that
    # EffectiveConfirmedWeight returns too: both revisions pay 3
    (3, I63, 1, 3),
]


@pytest.mark.parametrize("weight, confirmed, raw, expected", REWARD_WEIGHT)
def test_reward_weight_is_the_chains_effective_weight(conn, weight, confirmed, raw, expected):
    got = one(conn, "SELECT reward_weight, error FROM fn.reward_weight(%s, %s, %s, %s::jsonb, %s)",
              weight, confirmed, raw, SCALES, NEWEST)
    assert got == (expected, None)


@pytest.mark.parametrize("weight, confirmed, raw, inline", [
    (2 ** 32, 2 ** 32, 1, 0),            # quotient 2^64: Int64() keeps 0
    (3, 2 ** 62, 1, 0),                  # quotient 3 * 2^62: Int64() = -2^62, paid as 0
    (2 ** 33, 2 ** 32 + 1, 2, 2 ** 32),  # quotient 2^64 + 2^32: Int64() = 2^32, below the weight
])
def test_a_quotient_past_int64_where_the_revisions_part_is_not_guessed(conn, weight, confirmed, raw, inline):
    # bitcoin_rewards.go computing confirmed * weight / raw inline takes big.Int Int64() (low 64 bits) before the
    # full-weight cap; types/weight.go EffectiveConfirmedWeight returns the full weight when confirmed >= raw.
    # Which chain versions carry which is not established, so the figure is an error naming both
    got = one(conn, "SELECT reward_weight, weight_basis, error FROM fn.reward_weight(%s, %s, %s, %s::jsonb, %s)",
              weight, confirmed, raw, SCALES, NEWEST)
    assert got[:2] == (None, None)
    assert f"Int64() pays {inline}, the one with EffectiveConfirmedWeight pays {weight}" in got[2]


def test_reward_weight_unknown_inputs_stay_unknown(conn):
    for args in ((None, 5, 5, SCALES), (5, None, 5, SCALES), (5, 5, None, SCALES), (5, 5, 5, None)):
        got = one(conn, "SELECT reward_weight, error FROM fn.reward_weight(%s, %s, %s, %s::jsonb, %s)", *args, NEWEST)
        assert got[0] is None and got[1]
    assert one(conn, "SELECT reward_weight, weight_basis FROM fn.reward_weight(5, NULL, NULL, '{}', %s)",
               NEWEST) == (5, "full")


# ------------------------------------------------------------------ delegation (v0.2.14 on)

def test_penalty_entries_truncate_one_at_a_time(conn):
    # two penalty entries of 0.5 on weight 3: each removes trunc(0.5 * 3) = 1 of the weight before any penalty,
    # leaving 1; the summed fraction 1.0 would remove trunc(3) = 3
    assert one(conn, "SELECT fn.delegated_reward_weight_entries(3, '{}', '{0.5,0.5}')")[0] == 1
    # 0.5 then 0.7 of 1000: 500, then min(700, 500): 0 (the chain's DuplicateEntriesAreAdditiveAndClamped)
    assert one(conn, "SELECT fn.delegated_reward_weight_entries(1000, '{}', '{0.5,0.7}')")[0] == 0
    # transfers take from the weight after the penalties: 80 % penalty leaves 200, then 30 % of 200 = 60
    assert one(conn, "SELECT fn.delegated_reward_weight_entries(1000, '{0.3}', '{0.8}')")[0] == 140
    # three transfers of 0.4 of 10: 4, 4, then what is left (2)
    assert one(conn, "SELECT fn.delegated_reward_weight_entries(10, '{0.4,0.4,0.4}', '{}')")[0] == 0
    # a negative fraction or share moves nothing
    assert one(conn, "SELECT fn.delegated_reward_weight_entries(10, '{-0.4}', '{-1}')")[0] == 10
    # the single-entry form agrees
    assert one(conn, "SELECT fn.delegated_reward_weight(3, 0, 1, 0.5)")[0] == 2


def test_a_share_past_eighteen_decimals_moves_nothing(conn):
    # LegacyNewDecFromStr("0.0500000000000000001") fails (19 decimals): delegationShareOfWeight returns 0
    share = Decimal("0.0500000000000000001")
    assert one(conn, "SELECT fn.delegated_reward_weight(1000, %s)", share)[0] == 1000
    assert one(conn, "SELECT fn.delegation_share_of_weight(%s, 1000)", share)[0] == 0
    # trailing zeros do not count (decimal.String() drops them): 18 significant decimals move their share
    assert one(conn, "SELECT fn.delegated_reward_weight(1000, 0.050000000000000000000)")[0] == 950
    assert one(conn, "SELECT fn.delegation_share_of_weight(0.000000000000000001, %s)", I63)[0] == 9


def test_delegation_unknowns_stay_unknown(conn):
    assert one(conn, "SELECT fn.delegated_reward_weight_entries(NULL, '{0.05}', '{}')")[0] is None
    assert one(conn, "SELECT fn.delegated_reward_weight_entries(10, '{0.05,NULL}', '{}')")[0] is None
    assert one(conn, "SELECT fn.delegated_reward_weight_entries(10, '{}', NULL)")[0] is None
    assert one(conn, "SELECT fn.delegated_reward_weight(10, 0.05, 1, NULL)")[0] is None


# ------------------------------------------------------------------ epoch reward errors (v0.2.8 on)

def _reward(conn, decay, genesis, version=NEWEST, epoch=366):
    params = {"initial_epoch_reward": "323000000000000", "decay_rate": decay, "genesis_epoch": genesis}
    return one(conn, "SELECT reward, error, chain_error FROM fn.theoretical_epoch_reward_safe(%s, %s::jsonb, %s)",
               epoch, json.dumps(params), version)


def test_an_epoch_reward_the_chain_cannot_compute_is_paid_as_zero(conn):
    # CalculateFixedEpochReward errors (a decay rate GetExponent does not know; epochs since genesis >= 2^31 - 1,
    # here a genesis epoch after the epoch, which wraps the uint64): the settlement logs it and pays 0
    for decay, genesis in (({"value": "-5", "exponent": -4}, "1"), ({"value": "-475", "exponent": -6}, "400")):
        reward, error, chain_error = _reward(conn, decay, genesis)
        assert (reward, error) == (0, None)
        assert chain_error.endswith("the chain pays an epoch reward of 0")
    # the known rate: the published epoch 366 figure, no error
    assert _reward(conn, {"value": "-475", "exponent": -6}, "1") == (271_585_585_901_857, None, None)
    # no decay (nil DecayRate) or no epochs since genesis: the initial reward, whatever the rate
    assert _reward(conn, {"value": "-5", "exponent": -4}, "366")[0] == 323_000_000_000_000
    # before v0.2.8 there is no table: math.Exp computes any rate
    assert _reward(conn, {"value": "-5", "exponent": -4}, "1", "v0.2.7")[0] > 0


def test_an_epoch_reward_that_is_not_the_chains_error_stays_unknown(conn):
    reward, error, chain_error = _reward(conn, {"value": "-475", "exponent": -6}, "1", "v9.9.9")
    assert reward is None and "unknown chain version" in error and chain_error is None
    got = one(conn, "SELECT reward, error FROM fn.theoretical_epoch_reward_safe(366, "
                    "'{\"initial_epoch_reward\": \"-5\", \"decay_rate\": \"-0.000475\", \"genesis_epoch\": \"1\"}')")
    assert got[0] is None and "is not a uint64" in got[1]
    assert one(conn, "SELECT reward, error FROM fn.theoretical_epoch_reward_safe(366, NULL)") == (
        None, "no bitcoin_reward_params captured for the epoch")


def test_restitution_of_an_epoch_without_a_reward_is_zero_not_unknown(db_url, tmp_path, conn):
    # the e366 anchor host (crossed the SPRT only because of 5 disputable invalidations) in an epoch whose decay
    # rate the chain cannot compute: nobody was paid an epoch reward, so nothing is owed for it
    from tests.support.restitution_kit import X, e366_anchor, params

    epoch_params = params(366)
    epoch_params["bitcoin_reward_params"] = dict(epoch_params["bitcoin_reward_params"],
                                                 decay_rate={"value": "-5", "exponent": -4})
    e366_anchor(db_url, tmp_path, epoch_params)
    cand, theo, amount, note = one(
        conn, "SELECT restitution_candidate, theoretical_epoch_reward, restitution_amount, "
              "evidence #>> '{reward,epoch_reward_chain_error}' FROM api.restitution_impact "
              "WHERE epoch_index = 366 AND participant = %s", X)
    assert (cand, theo, amount) == (True, 0, 0)
    assert note.startswith("unsupported decay rate")


# ------------------------------------------------------------------ the rest of the table: ties, zeros, maxima

U64 = 2 ** 64 - 1


@pytest.mark.parametrize("sql, expected", [
    # reward share: big.Int (weight * reward) / total, truncated; total 0 pays nothing; unknown stays unknown
    (f"SELECT fn.reward_share({U64}, {I63}, {I63})", U64),
    ("SELECT fn.reward_share(1000, 2, 3)", 666),
    ("SELECT fn.reward_share(1000, 5, 0)", 0),
    ("SELECT fn.reward_share(NULL, 5, 10)", None),
    # fixed epoch reward: initial 0 pays 0, nil decay pays the initial, no epochs since genesis pays the initial
    ("SELECT fn.theoretical_epoch_reward(366, 0, -0.000475, 1)", 0),
    ("SELECT fn.theoretical_epoch_reward(366, 323000000000000, NULL, 1)", 323_000_000_000_000),
    ("SELECT fn.theoretical_epoch_reward(366, 323000000000000, -0.000475, 366)", 323_000_000_000_000),
    ("SELECT fn.theoretical_epoch_reward(366, NULL, -0.000475, 1)", None),
    # getDynamicP0: the sample gate is < 1,000 requests or < 5 hosts (1,000 and 5 pass it); floor(missed * 1000 /
    # total) + 20 rounded up to a table; the 500 table skips the punishment (499 rounds up to it)
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(999, 80, 5, 0.1)", "(0.100,f)"),
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(1000, 80, 4, 0.1)", "(0.100,f)"),
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(1000, 81, 5, 0.1)", "(0.200,f)"),
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(1000, 80, 5, 0.1)", "(0.100,f)"),
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(1000, 479, 5, 0.1)", "(0.500,t)"),
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(1000, 380, 5, 0.1)", "(0.400,f)"),
    # governance p0 of 0.15 rounds up to the 0.20 table; unset is 0.10
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(10, 1, 1, 0.15)", "(0.200,f)"),
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(10, 1, 1, NULL)", "(0.100,f)"),
    # unknown epoch sums: unknown p0 and skip (it used to fall through to the 500 table and skip everyone)
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(NULL, 1, 5, 0.1)", "(,)"),
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(5000, 1, NULL, 0.1)", "(,)"),
    # before v0.2.10 the governance p0 itself (0.10 when unset), whatever the sums
    ("SELECT row(p0, skip_punishment)::text FROM fn.downtime_p0(NULL, NULL, NULL, NULL, 'v0.2.9')", "(0.10,f)"),
    # invalidation SPRT (precomputed terms): p0 or p1 = 0 gives log_fail 0, = 1 gives log_pass 0; LLR >= H crosses,
    # so a tie crosses
    ("SELECT log_fail FROM fn.sprt_log_terms(0, 0.1)", 0),
    ("SELECT log_pass FROM fn.sprt_log_terms(0.05, 1)", 0),
    ("SELECT log_fail FROM fn.sprt_log_terms(0.05, 0.10)", Decimal("0.693147180560")),
    ("SELECT crossed FROM fn.sprt_steps('{1}', '{0}', 0.05, 0.10, 0.693147180560)", True),
    ("SELECT crossed FROM fn.sprt_steps('{1}', '{0}', 0.05, 0.10, 0.693147180561)", False),
    ("SELECT crossed FROM fn.sprt_steps('{}', '{}', 0.05, 0.10, 0)", False),
    # power cap: a weight exactly at the limit is not capped (strictly greater only); one positive weight: none
    ("SELECT capped FROM fn.power_cap('{1,1}')", False),
    ("SELECT capped FROM fn.power_cap('{5}')", False),
    ("SELECT row(capped, cap)::text FROM fn.power_cap('{1,1,10}')", "(t,1)"),
])
def test_edge_table(conn, sql, expected):
    assert one(conn, sql)[0] == expected


def test_a_model_without_trusted_voting_power_is_not_paid_on_a_guess(conn):
    # types/weight.go EffectiveWeightFromModels (TestEffectiveWeightFromModels_SeparatedPolicies): trusted model a
    # (raw 10, confirmed 10) and untrusted b (raw 90), weight 100: the chain's reward weight is 100 when the epoch
    # separates confirmation accounting, the legacy formula gives 10 * 100 / 100 = 10. The flag is not captured, so
    # an untrusted scale is an error, and all-trusted scales keep the legacy formula
    mixed = json.dumps({"a": {"has_trusted_voting_power": True}, "b": {"has_trusted_voting_power": False}})
    weight, error = one(conn, "SELECT reward_weight, error FROM fn.reward_weight(100, 10, 100, %s::jsonb, %s)",
                        mixed, NEWEST)
    assert weight is None and "without trusted voting power" in error
    trusted = json.dumps({"a": {"has_trusted_voting_power": True}, "b": {"has_trusted_voting_power": True}})
    assert one(conn, "SELECT reward_weight, error FROM fn.reward_weight(100, 10, 100, %s::jsonb, %s)",
               trusted, NEWEST) == (10, None)


def test_an_epoch_without_requests_runs_the_governance_p0_without_skipping(db_url, tmp_path, conn):
    # getDynamicP0 over no participant with requests: the sample gate returns the governance p0 and no skip;
    # CheckAndPunishForDowntime then passes a host with total 0. The view had no sums row and gave skip NULL
    from tests.support.restitution_kit import params, summary
    from tests.support.rules_kit import gov_snapshot, load

    load(db_url, tmp_path, [gov_snapshot(epoch=377), params(377),
                            summary(377, "gonka1idle", inference_count=0, missed_requests=0)])
    assert one(conn, "SELECT downtime_passes, downtime_p0, downtime_skipped, downtime_null_reason "
                     "FROM api.restitution_outcomes WHERE epoch_index = 377 AND variant = 'current'") == (
        True, Decimal("0.100"), False, None)


def test_the_evidence_names_the_reward_terms_not_captured(db_url, tmp_path, conn):
    # CalculateParticipantBitcoinRewardsWithTransfers takes a negative CoinBalance (debt) off the reward coins, and
    # GetBitcoinSettleAmountsWithTransfers scales rewards down near the subsidy supply cap: the amount leaves both out
    from tests.support.restitution_kit import params, summary
    from tests.support.rules_kit import gov_snapshot, load

    load(db_url, tmp_path, [gov_snapshot(epoch=378), params(378),
                            summary(378, "gonka1idle", inference_count=0, missed_requests=0)])
    notes = one(conn, "SELECT evidence #> '{reward,not_computed}' FROM api.restitution_impact "
                      "WHERE epoch_index = 378")[0]
    assert any("debt" in n and "subsidy supply cap" in n for n in notes)

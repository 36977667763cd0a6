"""The devnet pays each epoch's reward by the chain's rule (indexer/devnet/payouts.py, downtime.py): the fixed epoch
reward and the weight share equal the indexer's SQL (fn.theoretical_epoch_reward, fn.reward_share), its downtime
verdicts equal fn.downtime_outcome_safe's, and on the demo's data every host the devnet paid is paid exactly what
api.restitution_impact's rule gives."""
from __future__ import annotations

import psycopg
import pytest

from indexer.devnet import downtime, payouts

BITCOIN = {"initial_epoch_reward": "323000000000000", "decay_rate": {"value": "-475", "exponent": -6},
           "genesis_epoch": "1"}


def test_epoch_reward_and_share_equal_the_sql(conn):
    for epoch in (1, 2, 366, 408, 5000):
        want = conn.execute("SELECT fn.theoretical_epoch_reward(%s, 323000000000000, -0.000475, 1)",
                            (epoch,)).fetchone()[0]
        assert payouts.fixed_epoch_reward(epoch, 323000000000000, "-0.000475", 1) == want
        for weight, total in ((100000, 1477000), (1, 3), (0, 10), (7, 0)):
            share = conn.execute("SELECT fn.reward_share(%s, %s, %s)", (want, weight, total)).fetchone()[0]
            assert payouts.rewarded_coins(epoch, weight, total, BITCOIN, active=True) == share
    assert payouts.rewarded_coins(408, 100000, 1477000, BITCOIN, active=True) == 18_024_451_030_098
    assert payouts.rewarded_coins(408, 100000, 1477000, BITCOIN, active=False) == 0
    assert payouts.rewarded_coins(408, 100000, 1477000, BITCOIN, active=True, downtime_passes=False) == 0


def test_bad_reward_inputs_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="epoch 0 is before the genesis epoch 1"):
        payouts.fixed_epoch_reward(0, 10, "0", 1)
    with pytest.raises(ValueError, match="unsupported decay rate: -0.5"):
        payouts.rewarded_coins(5, 1, 1, {**BITCOIN, "decay_rate": {"value": "-5", "exponent": -1}}, active=True)
    with pytest.raises(ValueError, match="binom_test_p0 of 600 permille"):
        downtime.governance_permille({"value": "6", "exponent": -1})


def test_downtime_test_equals_the_sql(conn):
    cases = [(0, 0), (3, 3), (2, 2), (5, 40), (12, 60), (20, 120), (150, 991), (99, 991), (100, 1000), (101, 1000)]
    for permille in downtime.SUPPORTED_PERMILLE:
        for missed, total in cases:
            want = conn.execute("SELECT fn.missed_stat_test(%s::bigint, %s::bigint, %s::numeric / 1000)",
                                (missed, total, permille)).fetchone()[0]
            assert downtime.missed_stat_test(missed, total, permille) == want, (missed, total, permille)
    assert downtime.governance_permille(None) == 100
    assert downtime.governance_permille({"value": "15", "exponent": -2}) == 200
    # getDynamicP0: under 1000 requests or 5 participants the governance p0; else the epoch's miss rate + 2 %,
    # rounded up to a table p0; at 500 permille the outage circuit breaker skips the punishment
    assert downtime.dynamic_p0_permille([(10, 90)] * 5) == (100, False)
    assert downtime.dynamic_p0_permille([(30, 170)] * 5) == (200, False)
    assert downtime.dynamic_p0_permille([(100, 100)] * 4) == (100, False)
    assert downtime.dynamic_p0_permille([(150, 50)] * 5) == (500, True)
    assert downtime.downtime_verdicts({"a": (150, 50), "b": (200, 0), "c": (0, 200), "d": (100, 100),
                                       "e": (199, 1)}) == dict.fromkeys("abcde", True)
    for (m, n) in ((100, 100), (10, 900)):
        got = conn.execute("SELECT d.p0 * 1000, d.skip_punishment FROM fn.downtime_p0(%s, %s, 5, 0.1) d",
                           (5 * (m + n), 5 * m)).fetchone()
        assert downtime.dynamic_p0_permille([(m, n)] * 5) == (int(got[0]), got[1])


def test_tables_that_cannot_be_read_stop_with_the_file_named(tmp_path, monkeypatch):
    (tmp_path / "functions").mkdir()
    (tmp_path / "functions" / "31_missed_stat_tables.sql").write_text("-- emptied\n")
    monkeypatch.setattr(downtime, "SQL_DIR", tmp_path)
    downtime.critical_tables.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"31_missed_stat_tables.sql: expected the v0.2.10 tables"):
            downtime.missed_stat_test(1, 5, 100)
    finally:
        downtime.critical_tables.cache_clear()


def test_the_demo_chain_pays_what_the_rule_gives(demo_db_url):
    with psycopg.connect(demo_db_url) as c:
        rows = c.execute("SELECT epoch_index, participant, chain_rewarded_coins, reward_if_passed, "
                         "payout_matches_rule, downtime_passes, excluded_reason FROM api.restitution_impact "
                         "ORDER BY 1, 2").fetchall()
    assert len(rows) == 21
    paid = [r for r in rows if r[2] > 0]
    assert len(paid) == 10 and all(r[4] is True and r[2] == r[3] for r in paid)
    # paid exactly when the indexer's own downtime test passes and the chain did not exclude the host
    assert all((r[2] > 0) == (r[5] is True and r[6] is None) for r in rows)


@pytest.mark.parametrize("weights", [
    [600, 400], [700, 200, 100], [100, 200, 300, 400], [10, 10, 970, 10], [500, 100, 500, 100], [100] * 4, [500],
    [], [0, 10238, 34658, 36806], [10, 0], *([100000 + 37000 * i for i in range(k)] for k in (2, 3, 4, 7)),
])
def test_the_devnet_power_cap_equals_the_sql(conn, weights):
    got = conn.execute("SELECT capped, cap FROM fn.power_cap_apply(%s::bigint[], true)", (weights,)).fetchone()
    assert payouts.power_cap(weights) == (got[1] if got[0] else None)


def test_the_devnet_cap_rounds_like_shopspring():
    from fractions import Fraction
    p = Fraction("0.39999999999999999999")  # the quotient 3p / (1 - p) is 2 - 8e-20: Div rounds it to 2
    assert payouts._go_div_int_part(3 * p, 1 - p) == 2
    assert payouts._go_div_int_part(Fraction(9), Fraction(7, 10)) == 12  # 12.857… truncated


@pytest.mark.parametrize("hosts", [2, 3, 4])
def test_a_small_devnet_pays_capped_weights_and_the_indexer_agrees(db_url, hosts):
    """With 2 - 4 hosts the cap binds (weights 100,000 + 37,000 i): the devnet pays on capped weights, and the
    indexer's rule (api.restitution_impact) gives every paid host exactly what the devnet paid."""
    from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
    from indexer.poller import poll_once
    from indexer.sources.gonka import RetryPolicy

    policy = RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=8)
    scn = Scenario(ScenarioConfig(seed=11, epochs=2, escrows_per_epoch=1, inferences_per_escrow=8, hosts=hosts))
    with DevnetServer(scn) as net:
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=policy, private_hosts=True)
        for _ in range(len(scn.epochs)):
            net.advance_epoch()
            poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=policy, private_hosts=True)
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT epoch_index, participant, chain_rewarded_coins, reward_if_passed, "
                         "payout_matches_rule, effective_weight, power_cap, reward_weight, power_cap_may_bind, "
                         "theoretical_epoch_reward, total_weight, excluded_reason, payout_by_rule, "
                         "reward_weight_error FROM api.restitution_impact "
                         "WHERE chain_rewarded_coins IS NOT NULL ORDER BY 1, 2").fetchall()
    assert {r[0] for r in rows} == {e.epoch_index for e in scn.epochs}
    paid = [r for r in rows if r[2] > 0]
    assert paid and all(r[4] is True and r[2] == r[12] for r in paid)
    # reward_if_passed is the epoch without the disputable penalties: the same figure, unless a host the chain
    # excluded with disputable invalidations might have been ACTIVE without them and would move the cap
    assert all(r[2] == r[3] or (r[3] is None and "is undecided, and the cap differs" in r[13]) for r in paid)
    capped = [r for r in rows if r[8]]
    assert capped  # the heaviest host (or an excluded one added back) is capped in some epoch
    for _, _, _, if_passed, _, effective, cap, weight, _, reward, total, *_ in capped:
        assert weight == cap < effective and if_passed == weight * reward // total

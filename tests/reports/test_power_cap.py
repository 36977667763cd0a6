"""The power cap the chain applies to the reward weights (fn.power_cap_optimal, fn.power_cap_apply, fn.power_cap):
ApplyPowerCappingForWeights / CalculateOptimalCap of gonka-ai/gonka inference-chain/x/inference/keeper/
bitcoin_rewards.go, on vectors worked by hand below (sort ascending; the first w_k > limit x (sumPrev + w_k (n-k))
caps every weight at IntPart(limit x sumPrev / (1 - limit (n-k))))."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("weights, version, expected", [
    # 2 hosts, limit 0.50: [400, 600]: k=1: 600 > 0.5 x 1000; cap = 0.5 x 400 / 0.5 = 400
    ([600, 400], "v0.2.12", (True, 400, "headcount")),
    # 3 hosts, limit 0.40: [100, 200, 700]: k=1: 200 > 0.4 x 500 is false (equal); k=2: 700 > 0.4 x 1000;
    # cap = 0.4 x 300 / 0.6 = 200
    ([700, 200, 100], "v0.2.13", (True, 200, "headcount")),
    # 4 hosts, limit 0.30: k=2: 300 > 0.3 x (300 + 300 x 2) = 270; cap = 0.3 x 300 / (1 - 0.6) = 225
    ([100, 200, 300, 400], "v0.2.18", (True, 225, "headcount = positive")),
    # k=3: 970 > 0.3 x 1000; cap = 0.3 x 30 / 0.7 = 12.857… -> 12 (IntPart truncates)
    ([10, 10, 970, 10], "v0.2.18", (True, 12, "headcount = positive")),
    # a tie at the top: k=2: 500 > 0.3 x (200 + 1000) = 360; cap = 0.3 x 200 / 0.4 = 150 for both
    ([500, 100, 500, 100], "v0.2.16", (True, 150, "headcount = positive")),
    # no binding: equal weights, and the devnet's 7 hosts (heaviest 21.8 percent)
    ([100, 100, 100, 100], "v0.2.12", (False, None, "headcount")),
    ([100000 + 37000 * i for i in range(7)], "v0.2.18", (False, None, "headcount = positive")),
    # one host, or none: never capped
    ([500], "v0.2.12", (False, None, "headcount")),
    ([], "v0.2.18", (False, None, "headcount = positive")),
    # a zero weight that changes nothing: 5 entries or 4 positives, both 0.30, never binding
    ([0, 100, 100, 100, 100], "v0.2.18", (False, None, "headcount = positive")),
    # the headcount rule counts a zero weight: [0, 10238, 34658, 36806] (gonka issue #1395): n = 4, limit 0.30,
    # k=1: 10238 > 0.3 x 30714 with sumPrev 0 -> cap 0, every host zeroed
    ([0, 10238, 34658, 36806], "v0.2.12", (True, 0, "headcount")),
    ([10, 0], "v0.2.13", (True, 0, "headcount")),
])
def test_power_cap_vectors(conn, weights, version, expected):
    got = conn.execute("SELECT capped, cap, rule, error FROM fn.power_cap(%s::bigint[], %s)",
                       (weights, version)).fetchone()
    assert got == (*expected, None)


def test_the_positive_weight_revision(conn):
    # [0, 10238, 34658, 36806] counted by positive weights: 3, limit 0.40; k=0: 10238 > 0.4 x 30714 is false;
    # k=1: 34658 > 0.4 x (10238 + 69316); cap = 0.4 x 10238 / 0.2 = 20476
    assert conn.execute("SELECT * FROM fn.power_cap_apply('{0,10238,34658,36806}', true)").fetchone() == (True, 20476)
    # one positive weight: no cap (the headcount revision zeroes it: limit 0.50, cap 0.5 x 0 / 0.5 = 0)
    assert conn.execute("SELECT * FROM fn.power_cap_apply('{10,0}', true)").fetchone() == (False, None)
    assert conn.execute("SELECT * FROM fn.power_cap_apply('{10,0}', false)").fetchone() == (True, 0)
    # a cap <= 0 is ignored by the positive revision: limit 0.2 with 4 weights caps at k=0 with sumPrev 0
    assert conn.execute("SELECT * FROM fn.power_cap_optimal('{5,5,5,5}', 0.2, true)").fetchone() == (False, None)
    assert conn.execute("SELECT * FROM fn.power_cap_optimal('{5,5,5,5}', 0.2, false)").fetchone() == (True, 0)
    # a denominator <= 0 caps at the weight itself; only a negative weight reaches it (the headcount revision
    # keeps it): [-10, 5, 5] at 0.5, k=0: -10 > 0.5 x -30 and 1 - 0.5 x 3 < 0
    assert conn.execute("SELECT * FROM fn.power_cap_optimal('{5,-10,5}', 0.5, false)").fetchone() == (True, -10)


def test_the_quotient_is_rounded_at_16_places_before_it_is_truncated(conn):
    # limit p = 0.39999999999999999999 over [1, 1, 1, 100]: k=3: 100 > p x 103; the quotient
    # 3p / (1 - p) = 1.19999999999999999997 / 0.60000000000000000001 = 2 - 8.3e-20 is just below 2:
    # shopspring Div rounds it to 2.0000000000000000, IntPart gives 2; the exact floor (and a plain numeric
    # division, whose own scale stops at 20 places) gives 1
    p = "0.39999999999999999999"
    assert conn.execute("SELECT * FROM fn.power_cap_optimal('{1,1,1,100}', %s::numeric, true)",
                        (p,)).fetchone() == (True, 2)
    assert conn.execute("SELECT trunc(3 * %s::numeric / (1 - %s::numeric))", (p, p)).fetchone()[0] == 1


@pytest.mark.parametrize("weights, version, message", [
    ([0, 10238, 34658, 36806], "v0.2.14", "holds a zero weight, and whether this version counts it (cap 0) or only "
                                          "the positive weights (cap 20476"),
    ([10, 0], None, "(cap 0) or only the positive weights (cap none"),
    ([100, None, 300], "v0.2.12", "the effective weight of an ACTIVE host of the epoch is unknown"),
    (None, "v0.2.12", "the effective weight of an ACTIVE host of the epoch is unknown"),
    ([600, 400], "v0.2.11", "the power cap on reward weights of chain v0.2.11 is not reproduced"),
    ([600, 400], "v9.9.9", "unknown chain version v9.9.9"),
    ([4611686018427387904, 4611686018427387904], "v0.2.12", "is past int64"),
])
def test_power_cap_unknown_says_why(conn, weights, version, message):
    capped, cap, rule, error = conn.execute("SELECT * FROM fn.power_cap(%s::bigint[], %s)",
                                            (weights, version)).fetchone()
    assert (capped, cap, rule) == (None, None, None) and message in error

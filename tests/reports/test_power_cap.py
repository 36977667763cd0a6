"""The power cap the chain applies to the reward weights (fn.power_cap_optimal, fn.power_cap_apply, fn.power_cap):
ApplyPowerCappingForWeights / CalculateOptimalCap of gonka-ai/gonka inference-chain/x/inference/keeper/
bitcoin_rewards.go, on vectors worked by hand below (sort ascending; the first w_k > limit x (sumPrev + w_k (n-k))
caps every weight at IntPart(limit x sumPrev / (1 - limit (n-k))))."""
from __future__ import annotations

import pytest

from indexer.reports.restitution import collect, markdown
from indexer.reports.restitution.markdown import _clip
from tests.support.rules_kit import load


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


# -- api.restitution_impact: the reward is paid on the capped weight ------------------------------------------------
BITCOIN = {"initial_epoch_reward": "323000000000000", "decay_rate": {"value": "-475", "exponent": -6},
           "genesis_epoch": "1"}


def _epoch(epoch: int, total: int, hosts: dict[str, dict], scales=None) -> list[dict]:
    recs = [{"kind": "epoch_params", "epoch_index": epoch, "total_weight": total, "bitcoin_reward_params": BITCOIN,
             "confirmation_weight_scales": {} if scales is None else scales}]
    return recs + [{"kind": "participant_epoch", "epoch_index": epoch, "participant": who, **fields}
                   for who, fields in hosts.items()]


def _impact(conn, epoch: int) -> dict[str, dict]:
    cur = conn.execute("SELECT participant, effective_weight, power_cap, reward_weight, power_cap_may_bind, "
                       "reward_if_passed, reward_weight_error, payout_matches_rule, theoretical_epoch_reward, "
                       "evidence -> 'reward' -> 'power_cap' AS cap_evidence "
                       "FROM api.restitution_impact WHERE epoch_index = %s", (epoch,))
    names = [d.name for d in cur.description]
    return {r[0]: dict(zip(names, r)) for r in cur.fetchall()}


def test_an_active_host_the_chain_did_not_pay_is_still_capped_in_the_list(db_url, tmp_path, conn):
    # the heavy host is ACTIVE (not excluded), so it is in the list the chain caps even though the chain paid it
    # nothing (as after a failed downtime test, which zeroes a weight only after the cap): [100, 100, 100, 700], k=3: 700 > 0.3 x 1000, cap = IntPart(0.3 x 300 / 0.7) = 128
    reward = conn.execute("SELECT fn.theoretical_epoch_reward(600, 323000000000000, -0.000475, 1)").fetchone()[0]
    hosts = {f"gonka1light{k}": {"weight": 100, "rewarded_coins": int(100 * reward // 1000)} for k in range(3)}
    hosts["gonka1heavy"] = {"weight": 700, "rewarded_coins": 0}
    load(db_url, tmp_path, _epoch(600, 1000, hosts), rules=False)
    rows = _impact(conn, 600)
    heavy = rows["gonka1heavy"]
    assert (heavy["effective_weight"], heavy["power_cap"], heavy["reward_weight"]) == (700, 128, 128)
    assert heavy["power_cap_may_bind"] is True and heavy["reward_if_passed"] == 128 * reward // 1000
    assert heavy["cap_evidence"]["lowered_by"] == 572 and heavy["cap_evidence"]["rule"] == "headcount = positive"
    for k in range(3):
        light = rows[f"gonka1light{k}"]
        assert (light["power_cap"], light["reward_weight"], light["power_cap_may_bind"]) == (128, 100, False)
        assert light["payout_matches_rule"] is True


def test_an_excluded_host_is_added_back_to_the_list_had_it_passed(db_url, tmp_path, conn):
    # ACTIVE [100, 100, 100]: 3 hosts, limit 0.40, no cap. The excluded host (500) had it passed would have been the
    # fourth: [100, 100, 100, 500], limit 0.30, k=3: 500 > 240, cap = IntPart(0.3 x 300 / 0.7) = 128
    hosts = {f"gonka1light{k}": {"weight": 100} for k in range(3)}
    hosts["gonka1out"] = {"weight": 500, "excluded_reason": "statistical_invalidations"}
    load(db_url, tmp_path, _epoch(601, 800, hosts), rules=False)
    rows = _impact(conn, 601)
    out = rows["gonka1out"]
    assert (out["effective_weight"], out["power_cap"], out["reward_weight"], out["power_cap_may_bind"]) == \
        (500, 128, 128, True)
    assert out["reward_if_passed"] == 128 * out["theoretical_epoch_reward"] // 800
    assert "plus this host's, which the chain excluded" in out["cap_evidence"]["list"]
    assert all((rows[f"gonka1light{k}"]["power_cap"], rows[f"gonka1light{k}"]["reward_weight"]) == (None, 100)
               for k in range(3))


def test_unknown_inputs_leave_the_capped_figure_unknown_with_the_reason(db_url, tmp_path, conn):
    # a host of the epoch is missing: the captured weights (300) fall short of total_weight (1000)
    hosts = {f"gonka1light{k}": {"weight": 100} for k in range(3)}
    recs = _epoch(602, 1000, hosts)
    # v0.2.12 needs the raw confirmation weight: one ACTIVE host lacks it, so no host's cap is known
    recs += _epoch(603, 300, {"gonka1a": {"weight": 100, "confirmation_weight": 100, "raw_confirmation_weight": 100},
                              "gonka1b": {"weight": 100, "confirmation_weight": 100, "raw_confirmation_weight": 100},
                              "gonka1c": {"weight": 100, "confirmation_weight": 100}})
    # the newest chain with a zero effective weight in the list: the two revisions disagree (cap 0 or 100)
    zero = {"weight": 100, "confirmation_weight": 0, "raw_confirmation_weight": 100}
    recs += _epoch(604, 400, {"gonka1zero": zero,
                              "gonka1x": {"weight": 100, "confirmation_weight": 100, "raw_confirmation_weight": 100},
                              "gonka1y": {"weight": 200, "confirmation_weight": 200, "raw_confirmation_weight": 200}},
                   scales={"m": {}})
    conn.execute("INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason) "
                 "VALUES (603, 603, 'v0.2.12', 'test'), (605, 605, 'v0.2.13', 'test')")
    # the same list under v0.2.13 (the headcount revision): cap 0 pays every host nothing
    recs += [dict(r, epoch_index=605) for r in recs[-4:]]
    load(db_url, tmp_path, recs, rules=False)
    missing = _impact(conn, 602)["gonka1light0"]
    assert missing["reward_weight"] is None and missing["reward_if_passed"] is None
    assert missing["reward_weight_error"].startswith("power cap: the captured hosts' weights sum to 300 but the "
                                                     "epoch's total_weight is 1000")
    assert missing["power_cap_may_bind"] is None and missing["power_cap"] is None
    (case,) = collect(db_url, (602, 602))
    assert ("Power cap unknown: `gonka1light0`: the captured hosts' weights sum to 300 but the epoch's total\\_weight "
            "is 1000") in markdown(case)
    rows = _impact(conn, 603)
    assert rows["gonka1a"]["reward_weight"] is None
    assert "the effective weight of an ACTIVE host of the epoch is unknown (gonka1c: no raw confirmation weight" \
        in rows["gonka1a"]["reward_weight_error"]
    assert rows["gonka1c"]["reward_weight_error"].startswith("no raw confirmation weight")  # its own input first
    rows = _impact(conn, 604)
    assert rows["gonka1zero"]["reward_weight"] == 0 and rows["gonka1zero"]["reward_weight_error"] is None
    assert rows["gonka1y"]["reward_weight"] is None and "(cap 0) or only the positive weights (cap 100" in \
        rows["gonka1y"]["reward_weight_error"]
    rows = _impact(conn, 605)
    assert {p: (r["power_cap"], r["reward_weight"], r["reward_if_passed"]) for p, r in rows.items()} == \
        {"gonka1zero": (0, 0, 0), "gonka1x": (0, 0, 0), "gonka1y": (0, 0, 0)}


def test_an_epoch_whose_exclusions_were_not_read_has_no_known_cap(db_url, tmp_path, conn):
    """The heavy host was excluded on chain, but the poller's excluded_participants read failed: its row says no
    exclusion, and in the list [100, 100, 100, 700] it would set a cap of 128 that the chain (list [100, 100, 100],
    no cap) never applied. Until the exclusions are read, no host's capped weight or reward is known, and each says
    why; once a read succeeds (the failure row goes) the figures are computed again."""
    from indexer.poller.store import Store
    from indexer.sources.gonka.snapshots import SnapshotFailure

    hosts = {f"gonka1light{k}": {"weight": 100} for k in range(3)}
    hosts["gonka1heavy"] = {"weight": 700}
    load(db_url, tmp_path, _epoch(606, 1000, hosts), rules=False)
    failed = SnapshotFailure(606, "excluded", "http://node/productscience/inference/inference/excluded_participants/"
                             "606", "HTTP 503: upstream unavailable", True)
    store = Store(conn, archive=False)
    store.snapshot_outcome(conn, [failed], [])
    rows = _impact(conn, 606)
    assert set(rows) == set(hosts)
    for row in rows.values():
        assert (row["power_cap"], row["reward_weight"], row["reward_if_passed"]) == (None, None, None)
        assert row["reward_weight_error"].startswith("power cap: the chain's exclusions of the epoch were not read "
                                                     "(excluded_participants: HTTP 503: upstream unavailable)")
        assert row["cap_evidence"]["error"] == row["reward_weight_error"].removeprefix("power cap: ")
    store.snapshot_outcome(conn, [], [failed.source])  # a later read succeeded (and found no exclusion)
    rows = _impact(conn, 606)
    assert (rows["gonka1heavy"]["power_cap"], rows["gonka1heavy"]["reward_weight"]) == (128, 128)
    assert all(r["reward_weight_error"] is None for r in rows.values())


def test_a_long_reason_is_cut_for_the_report():
    assert _clip("x" * 299) == "x" * 299
    assert _clip("y" * 400) == "y" * 299 + "…"


def test_a_host_the_chain_had_as_inactive_is_not_in_the_list_and_is_added_back_had_it_passed(db_url, tmp_path, conn):
    """The chain caps the weights of its ACTIVE hosts: a host whose status at the epoch's end was INACTIVE (the
    downtime rule, during the epoch) is not in that list, though not excluded. The lights' list is then [100, 100,
    100] (no cap), and the inactive host is priced as an excluded one is: the list with it added back, cap 128. A
    status the indexer does not know is kept as given and is not ACTIVE either; a status not read counts as
    ACTIVE."""
    hosts = {f"gonka1light{k}": {"weight": 100, "status": "ACTIVE"} for k in range(3)}
    hosts["gonka1idle"] = {"weight": 500, "status": "INACTIVE", "status_height": 6000}
    load(db_url, tmp_path, _epoch(607, 800, hosts)
         + _epoch(608, 800, {**hosts, "gonka1idle": {"weight": 500, "status": "SUSPENDED_FOR_TESTS"}})
         + _epoch(609, 800, {**hosts, "gonka1idle": {"weight": 500}}), rules=False)
    for epoch in (607, 608):
        rows = _impact(conn, epoch)
        idle = rows["gonka1idle"]
        assert (idle["effective_weight"], idle["power_cap"], idle["reward_weight"]) == (500, 128, 128)
        assert "which the chain had as " in idle["cap_evidence"]["list"]
        assert all((rows[f"gonka1light{k}"]["power_cap"], rows[f"gonka1light{k}"]["reward_weight"]) == (None, 100)
                   for k in range(3))
    assert conn.execute("SELECT participant_status FROM api.restitution_impact WHERE epoch_index = 608 "
                        "AND participant = 'gonka1idle'").fetchone()[0] == "SUSPENDED_FOR_TESTS"
    rows = _impact(conn, 609)  # not read: ACTIVE, in the list [100, 100, 100, 500]: cap 128 for every host
    assert (rows["gonka1idle"]["power_cap"], rows["gonka1light0"]["power_cap"]) == (128, 128)

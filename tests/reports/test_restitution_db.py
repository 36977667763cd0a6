"""api.restitution_impact / api.policy_whatif / chain versions, on hand-built records through the real pipeline
(ingest, replay, rules) and real PostgreSQL. Anchors: GonkaLabs GRC-E366 RESTITUTION_REPORT.md (25 invalid of 263,
LLR 4.46 > H = 4 with p0 0.05 and p1 0.10; epoch 366 reward 271,585,585,901,857 ngonka; 57,537 of 415,488 is
37,609.316890 GONKA)."""
from __future__ import annotations

from decimal import Decimal

import psycopg

from tests.support.restitution_kit import V1, X, e366_anchor, params, rest_of_epoch, small_escrow, summary
from tests.support.rules_kit import (B, GOV, Log, fam3, fam4, fam6_at_least, gov_snapshot, load, new_hash, stored)

def one(conn, sql, *args):
    return conn.execute(sql, args).fetchone()


def test_e366_anchor_llr_reward_and_flip(db_url, tmp_path, conn):
    # the anchor's share (57,537 of 415,488) is the chain v0.2.12 rule when the full weight is at least the raw
    # total: min(confirmation_weight, weight); the epoch is pinned to v0.2.12 by an analyst override
    e366_anchor(db_url, tmp_path)
    r = one(conn, "SELECT invalid, validated, disputable_invalid, sprt_max_llr, sprt_threshold, sprt_crossed, "
                  "sprt_crossed_without_disputable, sprt_max_llr_without_disputable, theoretical_epoch_reward, "
                  "reward_at_stake, restitution_candidate, exclusion_matches_sprt, flipped_test, counts_source "
                  "FROM api.restitution_impact WHERE epoch_index = 366 AND participant = %s", X)
    invalid, validated, disputable, llr, h, crossed, crossed_wo, llr_wo, theo, stake, cand, match, flip, src = r
    assert (invalid, validated, disputable) == (25, 238, 5)
    assert round(llr, 2) == Decimal("4.46") and h == 4 and crossed is True
    assert llr == one(conn, "SELECT fn.sprt_llr(25, 263, 0.05, 0.10)")[0]  # one settlement = one update
    assert crossed_wo is False and llr_wo < 4
    assert theo == 271_585_585_901_857
    assert stake == 37_609_316_890_103 and f"{stake / Decimal(10**9):,.6f}" == "37,609.316890"
    assert (cand, match, flip, src) == (True, True, "sprt", "chain")
    basis, if_passed, amount, lowered, cap = one(
        conn, "SELECT weight_basis, reward_if_passed, restitution_amount, power_cap_may_bind, power_cap "
              "FROM api.restitution_impact WHERE epoch_index = 366 AND participant = %s", X)
    assert (basis, if_passed, amount) == ("confirmation_capped", stake, stake)
    # had it passed, X would have been ACTIVE beside the rest: 2 hosts, limit 0.50, cap = 57,537, its own weight
    assert lowered is False and cap == 57537


def test_crosses_mid_epoch_but_ends_below(db_url, tmp_path, conn):
    # escrow 9101 settles first: 6 invalid, nothing else: 6 ln 2 = 4.16 >= 4 at step 1; 9102 then adds 300 passes
    recs = [gov_snapshot(epoch=370), params(370)]
    load(db_url, tmp_path, recs + small_escrow("9101", 370, invalid=6, served=0)
         + small_escrow("9102", 370, invalid=0, served=300))
    r = one(conn, "SELECT sprt_crossed, sprt_max_llr, sprt_final_llr, sprt_crossed_at_escrow, evidence "
                  "FROM api.restitution_impact WHERE epoch_index = 370 AND participant = %s", X)
    crossed, max_llr, final, at, evidence = r
    assert crossed is True and max_llr >= 4 and final < 0 and at == "9101"
    assert evidence["sprt_escrows"] == ["9101", "9102"]
    # the per-result trajectory agrees when every step is one result
    traj = one(conn, "SELECT crossed, crossed_at FROM fn.sprt_trajectory(array_fill(true, ARRAY[6]) || "
                     "array_fill(false, ARRAY[300]), 0.05, 0.10, 4)")
    assert traj == (True, 6)
    # settled_height (kept in the escrow record's extra) overrides the escrow-id order: 9102 first, never crosses
    log_b = small_escrow("9102", 370, invalid=0, served=300)
    log_b[0]["settled_height"] = 100
    log_a = small_escrow("9101", 370, invalid=6, served=0)
    log_a[0]["settled_height"] = 200
    load(db_url, tmp_path, [log_a[0], log_b[0]], name="heights.ndjson")
    r = one(conn, "SELECT sprt_crossed, evidence -> 'sprt_escrows' FROM api.restitution_impact "
                  "WHERE epoch_index = 370 AND participant = %s", X)
    assert r == (False, ["9102", "9101"])


def test_exclusion_observed_vs_computed_and_missing_snapshots(db_url, tmp_path, conn):
    recs = [gov_snapshot(epoch=371), params(371, exact=False),
            summary(371, X, confirmation_weight=1000, inference_count=20, missed_requests=0,
                    excluded_reason="statistical_invalidations"),
            gov_snapshot(epoch=372)]  # epoch 372: no epoch_params, no summaries
    load(db_url, tmp_path, recs + small_escrow("9201", 371, invalid=1, served=19)
         + small_escrow("9202", 372, invalid=1, served=5))
    r = one(conn, "SELECT sprt_crossed, excluded_reason, exclusion_matches_sprt, params_exact, downtime_passes, "
                  "evidence #>> '{params,inexact}' FROM api.restitution_impact WHERE epoch_index = 371")
    assert r[:5] == (False, "statistical_invalidations", False, False, True)
    assert "live parameters stood in" in r[5]
    r = one(conn, "SELECT downtime_passes, sprt_crossed, sprt_max_llr, restitution_candidate, counts_source, "
                  "evidence ->> 'downtime_null_reason', evidence ->> 'sprt_null_reason', reward_at_stake "
                  "FROM api.restitution_impact WHERE epoch_index = 372 AND participant = %s", X)
    assert r[:5] == (None, None, None, None, "replay")
    assert r[5] == "no epoch_performance_summary captured for this host and epoch"
    assert r[6] == "no validation_params snapshot captured for the epoch"
    assert r[7] is None


def test_downtime_flip_without_disputable_misses(db_url, tmp_path, conn):
    # B misses 7 of 20 at p0 = 0.10 (fails); all 7 are refused timeouts shown over the limit (max_tokens > the
    # governance limit), so without them B misses 0 of 20 (inference_count + 7, total unchanged): passes
    log = Log("9301", epoch=373)
    for _ in range(7):
        iid = log.start(5, max_tokens=GOV + 1)
        log.timeout(iid, "refused")
    recs = [gov_snapshot(epoch=373), params(373),
            summary(373, B, confirmation_weight=5000, inference_count=13, missed_requests=7)]
    recs += [summary(373, f"gonka1other{k}", inference_count=10, missed_requests=0) for k in range(5)]
    load(db_url, tmp_path, recs + log.records)
    r = one(conn, "SELECT missed, disputable_missed, downtime_passes, downtime_passes_without_disputable, "
                  "restitution_candidate, flipped_test FROM api.restitution_impact "
                  "WHERE epoch_index = 373 AND participant = %s", B)
    assert r == (7, 7, False, True, True, "downtime")
    assert one(conn, "SELECT fn.missed_stat_test(7, 20, 0.10)")[0] is False


def test_policy_variants_on_hand_built_penalties(db_url, tmp_path, conn):
    log = Log("9401", epoch=374)
    cases = {}
    cases["unknown"] = log.refusal(5)                                       # no payload: undetermined
    cases["prompt_over"] = log.refusal(5, payload=stored(fam3(GOV, 410_000)))  # prompt >= limit
    cases["sum_over"] = log.refusal(5, payload=stored(fam4(GOV, 398_000, 4096)))  # prompt + max > limit
    cases["fits"] = log.refusal(5, payload=stored(fam3(300_000, 350_000)))  # a lowered host: fits the limit
    for iid in cases.values():
        log.invalidate(iid)
    h = new_hash()
    rid = log.refusal(5, h, payload=stored(fam6_at_least(GOV, 4096)))
    log.served(6, h, input_tokens=GOV - 4096 + 1, output_tokens=50)        # a sibling only today's rule accepts
    log.error_miss(rid)
    recs = [gov_snapshot(epoch=374), params(374, h=("2", 0))]
    load(db_url, tmp_path, recs + log.records)
    got = {r[0]: r[1:] for r in conn.execute(
        "SELECT variant, removed_missed, removed_invalid, invalid, missed, sprt_crossed FROM api.policy_whatif "
        "WHERE epoch_index = 374 AND participant = %s", (B,))}
    assert got == {
        "current": (0, 0, 4, 1, True),              # 4 ln 2 = 2.77 >= 2
        "issue_2078": (1, 3, 1, 0, False),
        "tokenize_2093": (1, 2, 2, 0, False),
        "narrow_prompt_ge_limit": (0, 1, 3, 1, True),  # 3 ln 2 + ln(0.9/0.95) = 2.025 >= 2
        "hardened_sibling": (1, 0, 4, 0, True),
    }
    excused = {r[0]: r[1:] for r in conn.execute(
        "SELECT inference_id, excused_issue_2078, excused_tokenize_2093, excused_narrow_prompt_ge_limit "
        "FROM api.policy_penalties WHERE epoch_index = 374 AND penalty = 'invalid'")}
    assert excused[cases["unknown"]] == (True, False, False)
    assert excused[cases["prompt_over"]] == (True, True, True)
    assert excused[cases["sum_over"]] == (True, True, False)
    assert excused[cases["fits"]] == (False, False, False)


def test_chain_version_heights_and_override(db_url, tmp_path, conn):
    load(db_url, tmp_path, [{"kind": "epoch", "epoch_index": 380, "start_height": 5_700_000,
                             "end_height": 5_715_000}])
    assert one(conn, "SELECT chain_version, version_source FROM api.epoch_chain_versions "
                     "WHERE epoch_index = 380") == (None, "assumed_newest")
    conn.execute("UPDATE chain.upgrade SET height = 5_000_000 + ordinal * 10 FROM fn.chain_versions() v "
                 "WHERE v.chain_version = upgrade.chain_version AND v.ordinal <= 14")  # up to v0.2.13
    conn.execute("UPDATE chain.upgrade SET height = 5_710_000 WHERE chain_version = 'v0.2.13'")
    # the upgrades after v0.2.13 (seeded by migration 0017, heights unknown) may precede the epoch: not v0.2.13
    # on the strength of the older heights, but the newest known math, said as an assumption, with its lower bound
    r = one(conn, "SELECT chain_version, version_source, lower_bound, changed_in_epoch FROM api.epoch_chain_versions "
                  "WHERE epoch_index = 380")
    assert r == (None, "assumed_newest", "v0.2.13", True)
    conn.execute("UPDATE chain.upgrade SET height = 5_800_000 + 10 * (fn.version_key(chain_version))[3] "
                 "WHERE chain_version IN ('v0.2.14', 'v0.2.15', 'v0.2.16', 'v0.2.17', 'v0.2.18')")
    r = one(conn, "SELECT chain_version, version_source, changed_in_epoch FROM api.epoch_chain_versions "
                  "WHERE epoch_index = 380")
    assert r == ("v0.2.13", "upgrade_heights", True)
    conn.execute("UPDATE chain.upgrade SET height = 5_712_000 WHERE chain_version = 'v0.2.14'")
    assert one(conn, "SELECT chain_version, version_source FROM api.epoch_chain_versions WHERE epoch_index = 380"
               ) == ("v0.2.14", "upgrade_heights")
    # an upgrade the chain math does not reproduce (an operator records v0.2.19), in force for the epoch: named,
    # and the math refuses it by name instead of evaluating with another version's rules
    conn.execute("INSERT INTO chain.upgrade (chain_version, upgrade_name, height, source) "
                 "VALUES ('v0.2.19', 'v0.2.19', 5_713_000, 'operator: applied_plan/v0.2.19')")
    r = one(conn, "SELECT chain_version, version_source, lower_bound FROM api.epoch_chain_versions "
                  "WHERE epoch_index = 380")
    assert r == ("v0.2.19", "upgrade_heights", "v0.2.19")
    assert "unknown chain version v0.2.19" in one(
        conn, "SELECT error FROM fn.sprt_steps_safe(ARRAY[1]::bigint[], ARRAY[9]::bigint[], 0.05, 0.10, 4, 'v0.2.19')")[0]
    assert one(conn, "SELECT ordinal, chain_math, height FROM api.chain_versions WHERE chain_version = 'v0.2.19'") == (
        None, False, 5_713_000)
    # versions order by their numbers, not as text
    assert one(conn, "SELECT fn.version_key('v0.2.9') < fn.version_key('v0.2.13')")[0] is True
    conn.execute("INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason) "
                 "VALUES (375, 385, 'v0.2.11', 'analyst: archive node says v0.2.11')")
    assert one(conn, "SELECT chain_version, version_source FROM api.epoch_chain_versions "
                     "WHERE epoch_index = 380") == ("v0.2.11", "override")
    # read-only role: the api views and fn.chain_version_at work without access to schema chain
    with psycopg.connect(db_url) as c:
        c.execute("SET ROLE indexer_reader")
        assert c.execute("SELECT chain_version FROM api.epoch_chain_versions WHERE epoch_index = 380"
                         ).fetchone() == ("v0.2.11",)
        assert c.execute("SELECT count(*) FILTER (WHERE chain_math), count(*) FROM api.chain_versions"
                         ).fetchone() == (19, 20)


def test_settlement_pass_count_functions_match_the_chains_tests(conn):
    """fn.devshard_sprt_pass_cap / fn.devshard_sampled_passes against gonka-ai/gonka keeper/devshard_host_stats_test.go
    (TestDevshardSprtPassCap; the sampled cases of TestAggregateDevshardHostStats_*: assigned 8000, 16 slots,
    missed 0, so completed 8000), and the cap's uint64 wrap."""
    cap = lambda finished, bps: one(conn, "SELECT fn.devshard_sprt_pass_cap(%s, %s)", finished, bps)[0]  # noqa: E731
    assert [cap(0, 1000), cap(1000, 0), cap(1000, 1000), cap(1000, 10000)] == [2, 2, 202, 2002]
    assert cap(2**32 - 1, 2**32 - 1) == ((2 * (2**32 - 1) ** 2) % 2**64) // 10000 + 2  # 2·f·bps wraps at 2^64
    sampled = lambda v, f, c, bps: one(conn, "SELECT fn.devshard_sampled_passes(%s, %s, %s, %s)",  # noqa: E731
                                       v, f, c, bps)[0]
    assert sampled(90, 100, 8000, 1000) == 22         # capped HostStats.validated, not derived 7990
    assert sampled(90, 100, 8000, 10000) == 90        # within the cap the reported count is used
    assert sampled(0, 0, 8000, 1000) == 0             # omitted validated/finished credits 0
    assert sampled(0, 50, 8000, 1000) == 0            # a sampled version reporting no passes gets none
    assert sampled(4, 0, 8000, 1000) == 2             # finished not extra-verified: the cap is the slack
    assert sampled(99999, 99999, 8000, 1000) == 1602  # finished above completed is clamped in the cap
    assert sampled(2, 5, 5, 10000) == 2               # within cap 12
    assert one(conn, "SELECT fn.devshard_sampled_passes(NULL, 1, 1, 1)")[0] is None  # unknown stays unknown


def test_restitution_reports_the_epochs_pass_count_flags(db_url, tmp_path, conn):
    """The evidence says which pass count the SPRT inputs use and what the epoch's params say about the chain's
    per-name policies: the flags as captured, {} when the snapshot has none, unknown without a snapshot."""
    on = {**params(380), "devshard_escrow_params": {"apply_sampled_pass_count": True, "validation_rate": 1000}}
    off = {**params(381), "devshard_escrow_params": {"validation_rate": 1000}}
    recs = [gov_snapshot(epoch=380), on, gov_snapshot(epoch=381), off, gov_snapshot(epoch=382), params(382)]
    load(db_url, tmp_path, recs + small_escrow("9801", 380, invalid=1, served=9)
         + small_escrow("9802", 381, invalid=1, served=9) + small_escrow("9803", 382, invalid=1, served=9))
    got = {e: p for e, p in conn.execute(
        "SELECT epoch_index, evidence -> 'pass_count_policy' FROM api.restitution_impact "
        "WHERE participant = %s AND epoch_index BETWEEN 380 AND 382", (X,))}
    assert got[380]["flags"] == {"apply_sampled_pass_count": True}
    assert got[381]["flags"] == {} and "flags_unknown" not in got[381]
    assert "flags" not in got[382] and got[382]["flags_unknown"].startswith("no devshard_escrow_params")
    assert all("assigned - missed - invalid" in p["note"] for p in got.values())
    # the SPRT inputs stay the DERIVED count whatever the flag: 9 passes, 1 failure in each epoch
    passes = {e: v for e, v in conn.execute(
        "SELECT epoch_index, validated FROM api.restitution_impact WHERE participant = %s "
        "AND epoch_index BETWEEN 380 AND 382", (X,))}
    assert passes == {380: 9, 381: 9, 382: 9}


def test_escrows_settled_after_the_epoch_are_not_sprt_steps(db_url, tmp_path, conn):
    """MsgSettleDevshardEscrow adds a settlement's host stats to the epoch's counters only while the escrow's epoch
    is the effective one: an escrow of epoch 383 settled after its last block (height 1000) is paid, never counted.
    Here it holds the 7 invalidations that would cross H = 4; counted only the escrows settled in time, X stays
    below. An escrow without a settlement height is counted (as before)."""
    on_time = small_escrow("9901", 383, invalid=0, served=9)
    on_time[0]["settled_height"] = 900
    late = small_escrow("9902", 383, invalid=7, served=0)  # 7 ln 2 - 9 x 0.054 = 4.37 >= 4 if counted
    late[0]["settled_height"] = 1100
    unknown = small_escrow("9903", 383, invalid=0, served=3)
    recs = [gov_snapshot(epoch=383), params(383), {"kind": "epoch", "epoch_index": 383, "start_height": 500,
                                                   "end_height": 1000}]
    load(db_url, tmp_path, recs + on_time + late + unknown)
    crossed, evidence = one(conn, "SELECT sprt_crossed, evidence FROM api.restitution_impact "
                                  "WHERE epoch_index = 383 AND participant = %s", X)
    assert crossed is False
    assert evidence["sprt_escrows"] == ["9901", "9903"]
    assert evidence["escrows_settled_after_epoch"]["escrows"] == ["9902"]
    assert {r[0] for r in conn.execute("SELECT DISTINCT escrow_id FROM api.restitution_steps "
                                       "WHERE epoch_index = 383")} == {"9901", "9903"}
    assert [one(conn, "SELECT fn.settled_after_epoch(%s, %s)", h, end)[0]
            for h, end in ((1001, 1000), (1000, 1000), (None, 1000), (1001, 0), (1001, None))] == [
        True, False, False, False, False]


def test_passes_count_the_chains_assigned_bound_at_the_settled_nonce(db_url, tmp_path, conn):
    """The chain credits a slot assigned - missed - invalid passes with assigned = devshardAssignedUpperBoundForSlot
    (settle nonce): every nonce of the slot's residue class up to the settled nonce, not the inferences that ran.
    X (slot 0 of 5) ran 6 inferences, all invalidated: 6 ln 2 = 4.16 >= 4 counting only what ran; with the escrow
    settled at nonce 130, slot 0's bound is 1 + (130 - 5) / 5 = 26, so 20 passes and LLR 3.08 < 4."""
    bare = small_escrow("9951", 384, invalid=6, served=0)
    bound = small_escrow("9952", 385, invalid=6, served=0)
    bound[0]["settle_nonce"] = 130
    load(db_url, tmp_path, [gov_snapshot(epoch=384), params(384), gov_snapshot(epoch=385), params(385)]
         + bare + bound)
    got = {e: r for e, *r in conn.execute(
        "SELECT epoch_index, sprt_crossed, validated, (evidence ->> 'assigned_from_settle_nonce')::boolean "
        "FROM api.restitution_impact WHERE participant = %s AND epoch_index IN (384, 385)", (X,))}
    assert got[384] == [True, 0, False]
    assert got[385] == [False, 20, True]
    assert [one(conn, "SELECT fn.devshard_assigned_upper_bound(%s, %s, %s)", n, size, slot)[0]
            for n, size, slot in ((0, 16, 0), (15, 16, 0), (16, 16, 0), (14, 16, 15), (15, 16, 15), (100, 16, 4),
                                  (130, 5, 0))] == [0, 0, 1, 0, 1, 7, 26]


def test_counters_whose_sum_passes_int64_pass_the_downtime_test_as_on_the_chain(db_url, tmp_path, conn):
    # the chain's counters are uint64 and the downtime test's total is inference_count + missed_requests: past
    # 2^63 - 1 that sum stopped every restitution view (bigint out of range) for every reader. On the chain
    # (keeper/accountsettle.go CheckAndPunishForDowntime) int(total) is then negative, MissedStatTest errors, and
    # the error keeps the reward: the host passes, and the view says which error the chain swallowed
    top = 2 ** 63 - 1
    recs = [gov_snapshot(epoch=374), params(374), summary(374, X, inference_count=top, missed_requests=top),
            summary(374, B, inference_count=10, missed_requests=0)]
    load(db_url, tmp_path, recs + small_escrow("9401", 374, invalid=0, served=3))
    for view in ("api.restitution_outcomes", "api.restitution_impact", "api.policy_whatif"):
        assert conn.execute(f"SELECT * FROM {view}").fetchall()
    total, passes, null_reason, chain_error = one(
        conn, "SELECT downtime_total, downtime_passes, downtime_null_reason, downtime_chain_error "
              "FROM api.restitution_outcomes WHERE epoch_index = 374 AND participant = %s AND variant = 'current'", X)
    assert (total, passes, null_reason) == (None, True, None)
    assert chain_error.startswith("invalid input") and chain_error.endswith("the chain keeps the reward")
    assert one(conn, "SELECT downtime_passes_without_disputable, evidence #>> '{downtime,chain_error}' "
                     "FROM api.restitution_impact WHERE epoch_index = 374 AND participant = %s", X) == (True, chain_error)


def test_unknown_stays_unknown(db_url, tmp_path, conn):
    # no epoch_performance_summary for X: the downtime test cannot run, so "no flip" cannot be claimed even though
    # the SPRT does not flip; V1 executed nothing (no replayed escrow results): its SPRT is unknown likewise
    recs = [gov_snapshot(epoch=371), params(371),
            summary(371, V1, weight=1000, confirmation_weight=1000, inference_count=50, missed_requests=0)]
    load(db_url, tmp_path, recs + small_escrow("9201", 371, invalid=2, served=40, disputable=1))
    cand, reason, amount, crossed = one(conn, "SELECT restitution_candidate, unknown_reason, restitution_amount, "
                                              "sprt_crossed FROM api.restitution_impact "
                                              "WHERE epoch_index = 371 AND participant = %s", X)
    assert crossed is False and cand is None and amount is None
    assert reason == "downtime test: no epoch_performance_summary captured for this host and epoch"
    cand, reason, amount = one(conn, "SELECT restitution_candidate, unknown_reason, restitution_amount "
                                     "FROM api.restitution_impact WHERE epoch_index = 371 AND participant = %s", V1)
    assert (cand, amount) == (None, None)
    assert reason == "invalidation SPRT: no replayed escrow results for this host in the epoch"


def test_chain_exclusion_the_replay_does_not_reproduce_is_unknown(db_url, tmp_path, conn):
    # the chain excluded X for statistical_invalidations; the replay's LLR stays below H with and without the
    # disputable invalidations: the cause is not shown, so the candidate is NULL with the numbers in the reason
    recs = [gov_snapshot(epoch=372), {**params(372), "confirmation_weight_scales": {}},
            summary(372, X, weight=60000, confirmation_weight=60000, inference_count=103, missed_requests=0,
                    invalidated_inferences=3, validated_inferences=100, excluded_reason="statistical_invalidations"),
            rest_of_epoch(372)]
    load(db_url, tmp_path, recs + small_escrow("9301", 372, invalid=3, served=100, disputable=2))
    cand, reason, not_reproduced, amount, if_passed = one(
        conn, "SELECT restitution_candidate, unknown_reason, exclusion_not_reproduced, restitution_amount, "
              "reward_if_passed FROM api.restitution_impact WHERE epoch_index = 372 AND participant = %s", X)
    assert cand is None and not_reproduced is True and amount is None
    assert if_passed == 60000 * 270_812_668_911_915 // 415488  # newest chain, empty scales: the full weight
    assert reason.startswith("invalidation SPRT: the chain excluded the host for statistical_invalidations but the "
                             "replayed test does not cross (max LLR ")
    assert "< H 4; without the disputable penalties " in reason


def test_an_inactive_host_with_disputable_misses_is_undecided_not_cleared(db_url, tmp_path, conn):
    """The chain had B INACTIVE at the epoch's end: its in-epoch downtime SPRT (not modelled) took it out of the
    rewards. One of its misses is disputable and the settlement's downtime test passes with and without it, so
    whether the disputable miss made B INACTIVE is unknown (NULL, with the reason), not "no restitution"; the same
    host ACTIVE is cleared (false)."""
    recs = []
    for epoch, status in ((375, "INACTIVE"), (376, "ACTIVE")):
        log = Log(f"95{epoch}", epoch=epoch)
        iid = log.start(5, max_tokens=GOV + 1)
        log.timeout(iid, "refused")
        recs += [gov_snapshot(epoch=epoch), params(epoch), *log.records,
                 summary(epoch, B, confirmation_weight=5000, inference_count=39, missed_requests=1, status=status)]
        recs += [summary(epoch, f"gonka1other{k}", inference_count=10, missed_requests=0) for k in range(5)]
    load(db_url, tmp_path, recs)
    got = {e: one(conn, "SELECT disputable_missed, downtime_passes, downtime_passes_without_disputable, "
                        "restitution_candidate, unknown_reason, participant_status FROM api.restitution_impact "
                        "WHERE epoch_index = %s AND participant = %s", e, B) for e in (375, 376)}
    assert got[375][:4] == (1, True, True, None) and got[375][5] == "INACTIVE"
    assert got[375][4].startswith("participant status: the chain had the host INACTIVE at the epoch's end")
    assert got[376][:5] == (1, True, True, False, None)

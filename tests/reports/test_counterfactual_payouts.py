"""The counterfactual restitution pays: the epoch without the disputable penalties as the chain would have settled
it, on hand-built epochs through the real pipeline (ingest, replay, rules) and real PostgreSQL.

Chain code read: gonka-ai/gonka inference-chain/x/inference/keeper/bitcoin_rewards.go, the stored revision with
CalculateParticipantBitcoinRewardsWithTransfers: one list of effective weights of the ACTIVE hosts is capped
together (ApplyPowerCappingForWeights), a host whose status is not ACTIVE gets no reward, the downtime test zeroes a
weight after the cap on getDynamicP0's epoch-wide p0, the denominator is the sum of full weights, and the share is
big.Int (weight x reward) / total, truncated; keeper/devshard_host_stats.go
AggregateDevshardHostStatsIntoCurrentEpochStats: per slot completed = assigned - missed, validated = completed -
invalid, one SPRT per host and epoch."""
from __future__ import annotations

from decimal import Decimal

from indexer.reports.restitution import collect, markdown
from tests.support.rules_kit import GOV, MINIMAX, MODEL, B, Log, gov_snapshot, load

# ------------------------------------------------------------------ the counterfactual on hand-built epochs

V1, V2 = "gonka1valid1", "gonka1valid2"
BITCOIN = {"initial_epoch_reward": "323000000000000", "decay_rate": {"value": "-475", "exponent": -6},
           "genesis_epoch": "1"}


def _dec(value: str, exponent: int) -> dict:
    return {"value": value, "exponent": exponent}


def _params(epoch: int, total: int) -> dict:
    return {"kind": "epoch_params", "epoch_index": epoch, "total_weight": total, "bitcoin_reward_params": BITCOIN,
            "confirmation_weight_scales": {}, "params_exact": True,
            "validation_params": {"false_positive_rate": _dec("5", -2), "bad_participant_invalidation_rate":
                                  _dec("1", -1), "invalidation_h_threshold": _dec("4", 0),
                                  "binom_test_p0": _dec("1", -1)}}


def _host(epoch: int, who: str, weight: int, **fields) -> dict:
    return {"kind": "participant_epoch", "epoch_index": epoch, "participant": who, "weight": weight,
            "confirmation_weight": weight, "inference_count": 263, "missed_requests": 0, **fields}


def _sprt_flip(escrow_id: str, epoch: int, host: str) -> list[dict]:
    """`host` (slot 0) executes 263: 25 invalidated, 5 of them 0/0 refusals with no payload (disputable). The SPRT
    crosses H = 4 with them (LLR 4.46, the epoch-366 anchor) and not without."""
    log = Log(escrow_id, epoch=epoch, slots=[host, V1, V1, V2, V2])
    for k in range(25):
        iid = log.refusal(0) if k < 5 else log.served(0)
        log.invalidate(iid, challenger=1, voters=(3,))
    for _ in range(238):
        log.served(0)
    return log.records


def _reward(conn, epoch: int) -> int:
    return int(conn.execute("SELECT fn.theoretical_epoch_reward(%s, 323000000000000, -0.000475, 1)",
                            (epoch,)).fetchone()[0])


def _impact(conn, epoch: int) -> dict[str, dict]:
    cur = conn.execute("SELECT participant, restitution_candidate, reward_weight, power_cap, reward_if_passed, "
                       "restitution_amount, payout_by_rule, reward_shift_without_disputable, theoretical_epoch_reward, "
                       "evidence -> 'reward' -> 'power_cap' AS cap, reward_weight_error "
                       "FROM api.restitution_impact WHERE epoch_index = %s", (epoch,))
    names = [d.name for d in cur.description]
    return {r[0]: dict(zip(names, r)) for r in cur.fetchall()}


def test_two_hosts_excluded_by_disputable_invalidations_are_restored_together(db_url, tmp_path, conn):
    # ACTIVE [100, 100, 400]: 3 hosts, limit 0.40, k=2: 400 > 240, cap IntPart(0.4 x 200 / 0.6) = 133. X and Y
    # (300 each) were excluded only by disputable invalidations: X for statistical_invalidations, Y left INVALID.
    # Without the penalties both are ACTIVE in the one list: [100, 100, 300, 300, 400], limit 0.30, k=4: 400 > 360,
    # cap IntPart(0.3 x 800 / 0.7) = 342, so X and Y are not capped. Each alone would give [100, 100, 300, 400],
    # k=2: 300 > 240, cap IntPart(0.3 x 200 / 0.4) = 150: what pricing each host on its own (the earlier rule) paid
    E, X, Y = 700, "gonka1hostX", "gonka1hostY"
    reward = _reward(conn, 700)
    recs = [gov_snapshot(epoch=E), _params(E, 1200),
            _host(E, "gonka1light0", 100, rewarded_coins=100 * reward // 1200),
            _host(E, "gonka1light1", 100, rewarded_coins=100 * reward // 1200),
            _host(E, "gonka1heavy", 400, rewarded_coins=133 * reward // 1200),
            _host(E, X, 300, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0,
                  excluded_reason="statistical_invalidations"),
            _host(E, Y, 300, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0, status="INVALID")]
    load(db_url, tmp_path, recs + _sprt_flip("9701", E, X) + _sprt_flip("9702", E, Y))
    rows = _impact(conn, E)
    for who, other in ((X, Y), (Y, X)):
        r = rows[who]
        assert (r["restitution_candidate"], r["power_cap"], r["reward_weight"]) == (True, 342, 300)
        assert r["restitution_amount"] == r["reward_if_passed"] == 300 * reward // 1200
        assert r["payout_by_rule"] == 0 and r["cap"]["restored_hosts"] == [other]
    # the heavy host was paid on 133; with X and Y back it would have been paid on 342: the restitution changes what
    # it would have got, said in reward_shift_without_disputable (not paid, not recovered)
    heavy = rows["gonka1heavy"]
    assert heavy["payout_by_rule"] == 133 * reward // 1200 and heavy["cap"]["as_paid"]["cap"] == 133
    assert heavy["reward_shift_without_disputable"] == 342 * reward // 1200 - 133 * reward // 1200 > 0
    assert heavy["restitution_amount"] in (None, 0) and heavy["cap"]["restored_hosts"] == [X, Y]
    assert rows["gonka1light0"]["reward_shift_without_disputable"] == 0
    (case,) = collect(db_url, (E, E))
    text = markdown(case)
    assert "Restituting changes what others would have got" in text
    assert f"| `gonka1heavy` | {heavy['reward_shift_without_disputable']:,} |" in text


def test_the_cap_binds_only_after_restitution(db_url, tmp_path, conn):
    # ACTIVE [100, 100, 100]: limit 0.40, no cap. X (500), excluded by disputable invalidations alone, restored:
    # [100, 100, 100, 500], limit 0.30, k=3: 500 > 240, cap IntPart(0.3 x 300 / 0.7) = 128: X is owed 128 shares
    E, X = 701, "gonka1hostX"
    reward = _reward(conn, 701)
    recs = [gov_snapshot(epoch=E), _params(E, 800),
            *(_host(E, f"gonka1light{k}", 100, rewarded_coins=100 * reward // 800) for k in range(3)),
            _host(E, X, 500, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0,
                  excluded_reason="statistical_invalidations")]
    load(db_url, tmp_path, recs + _sprt_flip("9711", E, X))
    rows = _impact(conn, E)
    assert (rows[X]["power_cap"], rows[X]["reward_weight"]) == (128, 128)
    assert rows[X]["restitution_amount"] == 128 * reward // 800
    for k in range(3):
        light = rows[f"gonka1light{k}"]
        assert light["cap"]["as_paid"] == {"applies": False, "paid_weight": 100}
        assert (light["power_cap"], light["reward_shift_without_disputable"], light["payout_by_rule"]) == \
            (128, 0, 100 * reward // 800)


def test_an_undecided_exclusion_leaves_the_cap_it_would_move_unknown(db_url, tmp_path, conn):
    # Z was excluded for statistical_invalidations and has a disputable invalidation, but the replayed SPRT never
    # crosses (3 of 263): whether it would have been ACTIVE without them is undecided. With it the cap of the
    # ACTIVE [100, 100, 400] moves (133 without, 342 with Z and X back), so X's figure is unknown, not either one
    E, X, Z = 702, "gonka1hostX", "gonka1hostZ"
    log = Log("9722", epoch=E, slots=[Z, V1, V1, V2, V2])
    for k in range(3):
        iid = log.refusal(0) if k == 0 else log.served(0)
        log.invalidate(iid, challenger=1, voters=(3,))
    for _ in range(260):
        log.served(0)
    recs = [gov_snapshot(epoch=E), _params(E, 1200), _host(E, "gonka1light0", 100), _host(E, "gonka1light1", 100),
            _host(E, "gonka1heavy", 400),
            _host(E, X, 300, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0,
                  excluded_reason="statistical_invalidations"),
            _host(E, Z, 300, invalidated_inferences=3, validated_inferences=260, rewarded_coins=0,
                  excluded_reason="statistical_invalidations")]
    load(db_url, tmp_path, recs + _sprt_flip("9721", E, X) + log.records)
    rows = _impact(conn, E)
    assert rows[Z]["restitution_candidate"] is None
    x = rows[X]
    assert x["restitution_candidate"] is True and x["reward_weight"] is None and x["restitution_amount"] is None
    assert f"whether {Z} would have been ACTIVE without the disputable penalties is undecided" \
        in x["reward_weight_error"]
    assert x["cap"]["undecided_hosts"] == [Z]


def test_a_host_the_chain_paid_is_owed_only_what_it_was_not_paid(db_url, tmp_path, conn):
    # the replayed SPRT crosses only with the disputable invalidations, but the chain neither excluded the host nor
    # left it INVALID: it paid it in full. Owed: reward_if_passed less what it was paid = 0 (it was paid twice before)
    E, X = 703, "gonka1hostX"
    reward = _reward(conn, 703)
    recs = [gov_snapshot(epoch=E), _params(E, 1000), _host(E, "gonka1rest", 700, rewarded_coins=700 * reward // 1000),
            _host(E, X, 300, invalidated_inferences=25, validated_inferences=238,
                  rewarded_coins=300 * reward // 1000 - 5)]
    load(db_url, tmp_path, recs + _sprt_flip("9731", E, X))
    x = _impact(conn, E)[X]
    assert x["restitution_candidate"] is True and x["reward_if_passed"] == 300 * reward // 1000
    assert x["restitution_amount"] == 5  # only the part the chain did not pay


def test_zero_total_weight_and_a_host_alone(db_url, tmp_path, conn):
    reward = _reward(conn, 705)
    recs = [_params(704, 0), _host(704, "gonka1zero", 0, rewarded_coins=0),
            _params(705, 900), _host(705, "gonka1alone", 900, rewarded_coins=reward)]
    load(db_url, tmp_path, recs, rules=False)
    zero = _impact(conn, 704)["gonka1zero"]
    # the chain: no valid weight pays nothing, and a zero denominator pays nothing (totalPoCWeightBeforeDowntime > 0)
    assert (zero["reward_weight"], zero["reward_if_passed"], zero["payout_by_rule"]) == (0, 0, 0)
    alone = _impact(conn, 705)["gonka1alone"]
    # one positive weight: no cap (positiveCount <= 1); the whole reward, 900 x R / 900
    assert (alone["power_cap"], alone["reward_weight"], alone["payout_by_rule"]) == (None, 900, reward)
    assert alone["reward_shift_without_disputable"] == 0


def test_misses_removed_elsewhere_can_fail_a_host_that_passed(db_url, tmp_path, conn):
    # getDynamicP0 (bitcoin_rewards.go) over 5 hosts and 1,000 requests: 81 missed -> floor(81,000 / 1,000) + 20 =
    # 101 permille -> the 0.20 table. B's 2 refused timeouts over the limit are disputable: without them 79 missed ->
    # 99 -> the 0.10 table. H (30 of 200 missed, none disputable) passes at 0.20 and fails at 0.10: the others'
    # restitution would have cost H its whole reward, which the row says (and nothing pays or recovers)
    E, H = 706, "gonka1hostH"
    reward = _reward(conn, E)
    log = Log("9761", epoch=E)
    for _ in range(2):
        iid = log.start(5, max_tokens=GOV + 1)
        log.timeout(iid, "refused")
    share = 100 * reward // 500
    recs = [gov_snapshot(epoch=E), _params(E, 500),
            _host(E, H, 100, inference_count=170, missed_requests=30, rewarded_coins=share),
            _host(E, B, 100, inference_count=149, missed_requests=51, rewarded_coins=0),
            *(_host(E, f"gonka1other{k}", 100, inference_count=200, rewarded_coins=share) for k in range(3))]
    load(db_url, tmp_path, recs + log.records)
    assert conn.execute("SELECT fn.missed_stat_test(30, 200, 0.2), fn.missed_stat_test(30, 200, 0.1)").fetchone() \
        == (True, False)
    r = conn.execute("SELECT downtime_passes, downtime_passes_without_disputable, disputable_missed, downtime_p0, "
                     "evidence #>> '{downtime,p0_without_disputable}', restitution_candidate, payout_by_rule, "
                     "reward_shift_without_disputable, restitution_amount FROM api.restitution_impact "
                     "WHERE epoch_index = %s AND participant = %s", (E, H)).fetchone()
    assert r[:5] == (True, False, 0, Decimal("0.200"), "0.100")
    # (its SPRT has no replayed escrow here, so its own candidacy stays undecided: nothing is owed to it anyway)
    assert r[5] is None and r[6] == share and r[7] == -share and r[8] is None
    b = conn.execute("SELECT disputable_missed, downtime_passes, downtime_passes_without_disputable "
                     "FROM api.restitution_impact WHERE epoch_index = %s AND participant = %s", (E, B)).fetchone()
    assert b == (2, False, False)  # 49 of 200 still fails at 0.10: nothing owed to B either
    text = markdown(collect(db_url, (E, E))[0])
    assert f"| `{H}` | -{share:,} |" in text


def test_a_host_whose_only_penalties_are_disputable_is_owed_its_whole_share(db_url, tmp_path, conn):
    # 10 invalidations of 60, every one a 0/0 refusal with no payload (disputable): LLR 10 ln 2 + 50 ln(0.9/0.95)
    # = 4.23 >= H = 4, excluded; without them no invalidation at all. Beside an ACTIVE 700 (2 hosts, limit 0.50:
    # no cap binds at 300), owed the whole share on 300
    E, X = 707, "gonka1hostX"
    reward = _reward(conn, E)
    log = Log("9771", epoch=E, slots=[X, V1, V1, V2, V2])
    for _ in range(10):
        log.invalidate(log.refusal(0), challenger=1, voters=(3,))
    for _ in range(50):
        log.served(0)
    recs = [gov_snapshot(epoch=E), _params(E, 1000), _host(E, "gonka1rest", 700, rewarded_coins=700 * reward // 1000),
            _host(E, X, 300, inference_count=60, invalidated_inferences=10, validated_inferences=50,
                  rewarded_coins=0, excluded_reason="statistical_invalidations")]
    load(db_url, tmp_path, recs + log.records)
    r = conn.execute("SELECT invalid, disputable_invalid, sprt_crossed, sprt_crossed_without_disputable, "
                     "sprt_max_llr_without_disputable, restitution_candidate, restitution_amount, payout_by_rule "
                     "FROM api.restitution_impact WHERE epoch_index = %s AND participant = %s", (E, X)).fetchone()
    assert r[:4] == (10, 10, True, False) and r[4] <= 0
    assert (r[5], r[6], r[7]) == (True, 300 * reward // 1000, 0)


def test_a_downtime_flip_does_not_pay_a_host_the_sprt_still_excludes(db_url, tmp_path, conn):
    # penalties pulling both ways: 40 disputable misses (refused timeouts over the limit, escrow 9782) fail the
    # downtime test (40 of 303 at p0 0.10) and without them it passes; 25 invalidations that are not disputable
    # (escrow 9781, settled first) cross the SPRT with or without the misses -> the host still fails a test: nothing
    # owed
    E = 708
    log = Log("9781", epoch=E, slots=[B, V1, V1, V2, V2])
    for _ in range(25):
        log.invalidate(log.served(0), challenger=1, voters=(3,))
    for _ in range(238):
        log.served(0)
    late = Log("9782", epoch=E)
    for _ in range(40):
        late.timeout(late.start(5, max_tokens=GOV + 1), "refused")
    recs = [gov_snapshot(epoch=E), _params(E, 1000), _host(E, "gonka1rest", 700),
            _host(E, B, 300, inference_count=263, missed_requests=40, invalidated_inferences=25,
                  validated_inferences=238, rewarded_coins=0, excluded_reason="statistical_invalidations")]
    load(db_url, tmp_path, recs + log.records + late.records)
    r = conn.execute("SELECT disputable_missed, disputable_invalid, downtime_passes, "
                     "downtime_passes_without_disputable, sprt_crossed, sprt_crossed_without_disputable, "
                     "restitution_candidate, flipped_test, restitution_amount FROM api.restitution_impact "
                     "WHERE epoch_index = %s AND participant = %s", (E, B)).fetchone()
    assert r[:2] == (40, 0)
    assert r[2:6] == (False, True, True, True)
    assert (r[6], r[7], r[8]) == (True, "downtime", 0)


def test_disputable_invalidations_in_two_models_are_removed_together(db_url, tmp_path, conn):
    # the chain keeps one SPRT per host and epoch over every model's settlements. X: escrow 9791 (one model) 14
    # invalid of 132, escrow 9792 (another model) 13 of 131, 2 disputable in each. With all: LLR 3.32 after the
    # first, 27 ln 2 + 236 ln(0.9/0.95) = 5.95 after the second (crossed). Without one model's 2 it still crosses
    # (25 of 263: 4.46); without all 4: 2.96, not crossed. The counterfactual removes them together: a flip
    E, X = 709, "gonka1hostX"
    reward = _reward(conn, E)
    recs = [gov_snapshot(epoch=E), gov_snapshot(epoch=E, model=MINIMAX), _params(E, 1000),
            _host(E, "gonka1rest", 700, rewarded_coins=700 * reward // 1000),
            _host(E, X, 300, invalidated_inferences=27, validated_inferences=236, rewarded_coins=0,
                  excluded_reason="statistical_invalidations")]
    for escrow_id, model, invalid, served in (("9791", MODEL, 14, 118), ("9792", MINIMAX, 13, 118)):
        log = Log(escrow_id, epoch=E, model=model, slots=[X, V1, V1, V2, V2])
        for k in range(invalid):
            log.invalidate(log.refusal(0) if k < 2 else log.served(0), challenger=1, voters=(3,))
        for _ in range(served):
            log.served(0)
        recs += log.records
    load(db_url, tmp_path, recs)
    r = conn.execute("SELECT disputable_invalid, sprt_crossed, sprt_crossed_without_disputable, "
                     "evidence -> 'sprt_escrows', restitution_candidate, restitution_amount "
                     "FROM api.restitution_impact WHERE epoch_index = %s AND participant = %s", (E, X)).fetchone()
    assert r == (4, True, False, ["9791", "9792"], True, 300 * reward // 1000)
    one_model = conn.execute("SELECT crossed FROM fn.sprt_steps(ARRAY[14, 11]::bigint[], ARRAY[118, 120]::bigint[], "
                             "0.05, 0.10, 4)").fetchone()[0]
    assert one_model is True  # either model's two alone would not have changed the outcome


def test_what_was_paid_unknown_leaves_the_amount_unknown(db_url, tmp_path, conn):
    # the replayed SPRT flips, but neither rewarded_coins nor the downtime counts were captured (and no exclusion):
    # whether the chain paid the host is not known, so what is still owed is not known either (NULL, with why)
    E, X = 710, "gonka1hostX"
    recs = [gov_snapshot(epoch=E), _params(E, 1000),
            {"kind": "participant_epoch", "epoch_index": E, "participant": "gonka1rest", "weight": 700,
             "confirmation_weight": 700},
            {"kind": "participant_epoch", "epoch_index": E, "participant": X, "weight": 300,
             "confirmation_weight": 300}]
    load(db_url, tmp_path, recs + _sprt_flip("9801", E, X))
    r = conn.execute("SELECT restitution_candidate, reward_if_passed, payout_by_rule, restitution_amount, "
                     "unknown_reason FROM api.restitution_impact WHERE epoch_index = %s AND participant = %s",
                     (E, X)).fetchone()
    assert r[0] is True and r[1] == 300 * _reward(conn, E) // 1000 and r[2] is None and r[3] is None
    assert "what the chain paid the host is not known" in r[4]


def test_a_restored_host_of_unknown_weight_leaves_the_cap_unknown(db_url, tmp_path, conn):
    # chain v0.2.12 needs each host's raw confirmation weight; Y's was not captured, so its effective weight is
    # unknown. Y would have been ACTIVE without the disputable invalidations (its SPRT flips), so the list X is
    # priced on holds an unknown weight: X's figure is unknown, naming Y (not priced as if Y were absent)
    E, X, Y = 711, "gonka1hostX", "gonka1hostY"
    conn.execute("INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason) "
                 "VALUES (711, 711, 'v0.2.12', 'test')")
    raw = {"raw_confirmation_weight": 300}
    recs = [gov_snapshot(epoch=E), _params(E, 1200), _host(E, "gonka1light0", 100, raw_confirmation_weight=100),
            _host(E, "gonka1light1", 100, raw_confirmation_weight=100),
            _host(E, "gonka1heavy", 400, raw_confirmation_weight=400),
            _host(E, X, 300, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0,
                  excluded_reason="statistical_invalidations", **raw),
            _host(E, Y, 300, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0,
                  excluded_reason="statistical_invalidations")]
    load(db_url, tmp_path, recs + _sprt_flip("9811", E, X) + _sprt_flip("9812", E, Y))
    rows = _impact(conn, E)
    assert rows[Y]["reward_weight_error"] == "no raw confirmation weight captured for the host (its rows in the " \
        "model sub-groups of epoch_group_data)"
    x = rows[X]
    assert x["restitution_candidate"] is True and x["reward_weight"] is None and x["restitution_amount"] is None
    assert x["reward_weight_error"] == (f"power cap: the effective weight of {Y}, which the disputable penalties "
                                        "excluded (it would have been ACTIVE without them), is unknown")
    assert rows["gonka1heavy"]["reward_shift_without_disputable"] is None


def test_a_reward_and_weight_at_the_integer_limits(db_url, tmp_path, conn):
    # initial reward 2^64 - 1 with decay rate 0 (exp(0) = 1 in the chain's table): the epoch reward is 2^64 - 1; one
    # host of weight 2^63 - 1 alone: big.Int (2^63 - 1) x (2^64 - 1) / (2^63 - 1) = 2^64 - 1 exactly, a uint64 the
    # chain pays; nothing is capped or rounded on the way
    u64, i63 = 2**64 - 1, 2**63 - 1
    params = _params(712, i63)
    params["bitcoin_reward_params"] = {"initial_epoch_reward": str(u64), "decay_rate": "0", "genesis_epoch": "1"}
    load(db_url, tmp_path, [params, _host(712, "gonka1max", i63, inference_count=i63 - 1, missed_requests=1,
                                          rewarded_coins=u64)], rules=False)
    r = conn.execute("SELECT theoretical_epoch_reward, reward_weight, reward_if_passed, payout_by_rule, "
                     "payout_by_rule_matches, downtime_passes FROM api.restitution_impact "
                     "WHERE epoch_index = 712").fetchone()
    assert r == (u64, i63, u64, u64, True, True)


def test_a_host_excluded_for_another_reason_is_owed_nothing_or_undecided(db_url, tmp_path, conn):
    # X's SPRT crosses only with its disputable invalidations, but the chain excluded it for failed_confirmation_poc,
    # which they do not cause: without them it is still excluded and paid nothing, so nothing is owed. Y's reason is
    # one the indexer does not know: undecided, with the reason
    E, X, Y = 713, "gonka1hostX", "gonka1hostY"
    recs = [gov_snapshot(epoch=E), _params(E, 1300), _host(E, "gonka1rest", 700),
            _host(E, X, 300, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0,
                  excluded_reason="failed_confirmation_poc"),
            _host(E, Y, 300, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0,
                  excluded_reason="a_future_reason")]
    load(db_url, tmp_path, recs + _sprt_flip("9821", E, X) + _sprt_flip("9822", E, Y))
    got = {r[0]: r[1:] for r in conn.execute(
        "SELECT participant, restitution_candidate, restitution_amount, evidence ->> 'exclusion', unknown_reason "
        "FROM api.restitution_impact WHERE epoch_index = %s AND participant IN (%s, %s)", (E, X, Y)).fetchall()}
    assert got[X][:2] == (True, 0) and "it would have been excluded, and paid nothing, without them" in got[X][2]
    assert got[Y][:2] == (True, None)
    assert got[Y][3].startswith("the chain excluded the host for a_future_reason, which the indexer does not know")
    # neither is restored to the list the chain caps: their weights are not in the rest's counterfactual cap
    assert conn.execute("SELECT evidence #> '{reward,power_cap,restored_hosts}' FROM api.restitution_impact "
                        "WHERE epoch_index = %s AND participant = 'gonka1rest'", (E,)).fetchone()[0] is None


def test_a_host_left_inactive_or_of_an_unknown_status_is_owed_nothing_or_undecided(db_url, tmp_path, conn):
    # X's replayed SPRT crosses only with its disputable invalidations, but the chain had it INACTIVE (its in-epoch
    # downtime test) and it has no disputable miss: INACTIVE without them too, paid nothing, owed nothing. Y was
    # RAMPING, a status the indexer does not know to follow from the penalties or not: undecided
    E, X, Y = 714, "gonka1hostX", "gonka1hostY"
    recs = [gov_snapshot(epoch=E), _params(E, 1300), _host(E, "gonka1rest", 700),
            _host(E, X, 300, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0, status="INACTIVE"),
            _host(E, Y, 300, invalidated_inferences=25, validated_inferences=238, rewarded_coins=0, status="RAMPING")]
    load(db_url, tmp_path, recs + _sprt_flip("9831", E, X) + _sprt_flip("9832", E, Y))
    got = {r[0]: r[1:] for r in conn.execute(
        "SELECT participant, restitution_candidate, restitution_amount, evidence ->> 'exclusion', unknown_reason "
        "FROM api.restitution_impact WHERE epoch_index = %s AND participant IN (%s, %s)", (E, X, Y)).fetchall()}
    assert got[X][:2] == (True, 0) and got[X][2].startswith("INACTIVE at the epoch's end")
    assert got[Y][:2] == (True, None)
    assert got[Y][3].startswith("the chain had the host as RAMPING at the epoch's end")

"""The packaged alert rules on ingested data, each against the views it reads; the restitution rules against a
stand-in with the columns of interface.md §3 now, and against the real api.restitution_impact once it exists."""
from __future__ import annotations

from datetime import timedelta

import psycopg

from indexer.alerts.engine import Policy, evaluate
from indexer.alerts.rules import load_rules, run_rule
from indexer.synth import generate, write_ndjson
from tests.support.helpers import ingest, write_lines

RULES = {r.name: r for r in load_rules()}
REQUIRED = {"disputable_penalty", "sprt_within_reach", "downtime_by_disputable", "governance_limit_changed",
            "loophole_risk", "raised_limit_suspect", "ingest_lagging", "escrow_pruned_before_capture",
            "source_erroring"}


def test_every_rule_of_interface_section_4_is_packaged():
    assert REQUIRED <= set(RULES)


def test_rules_on_ingested_findings(db_url, tmp_path):
    path = tmp_path / "s.ndjson"
    write_ndjson(str(path), generate(seed=5, escrows=4, inferences=150, mix="adversarial"))
    ingest(db_url, path, rules=True)
    limits = [{"kind": "model_snapshot", "epoch_index": e, "model_id": "m/loop", "model_args": args}
              for e, args in ((900, ["--max-model-len", "8192"]), (901, ["--max-model-len", "16384"]),
                              (902, ["--max-model-len", "16384", "--max-model-len=32768"]))]
    ingest(db_url, write_lines(tmp_path / "m.ndjson", limits), rules=True)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO net.cursor (source, cursor, last_success_at, last_error, last_error_at) VALUES "
                     "('chain', '410', now() - interval '2 hours', 'ConnectError: refused', now()), "
                     "('escrow:77', '5', now(), NULL, NULL)")
        conn.execute("INSERT INTO net.epoch_state (epoch_index, state, escrows, escrows_final, reason) VALUES "
                     "(300, 'final', 4, 1, 'pruned'), (301, 'final', 0, 0, 'missed'), (302, 'final', 3, 3, 'pruned')")
        got = {name: run_rule(conn, RULES[name]) for name in REQUIRED if not name.startswith(("sprt", "downtime"))}
        hosts = conn.execute("SELECT DISTINCT epoch_index, participant FROM api.disputable_penalties").fetchall()
        suspects = conn.execute("SELECT DISTINCT epoch_index, participant, model_id FROM api.raised_limit_suspects"
                                ).fetchall()
    assert hosts and {(a.epoch_index, a.participant) for a in got["disputable_penalty"]} == set(hosts)
    assert {a.details["evidence_level"] for a in got["disputable_penalty"]} == {"none"}  # nothing verified here
    assert len(got["raised_limit_suspect"]) == len(suspects)
    changed = {a.alert_key: a.details for a in got["governance_limit_changed"]}
    assert changed.keys() == {"governance_limit_changed:m/loop:901", "governance_limit_changed:m/loop:902"}
    assert (changed["governance_limit_changed:m/loop:901"]["previous_limit"],
            changed["governance_limit_changed:m/loop:901"]["governance_limit"]) == (8192, 16384)
    assert [a.alert_key for a in got["loophole_risk"]] == ["loophole_risk:m/loop:902"]
    assert [a.alert_key for a in got["ingest_lagging"]] == ["ingest_lagging:chain"]
    assert got["ingest_lagging"][0].severity == "critical"  # two hours without success
    assert [a.alert_key for a in got["source_erroring"]] == ["source_erroring:chain"]
    assert sorted(a.alert_key for a in got["escrow_pruned_before_capture"]) == [
        "escrow_pruned_before_capture:300", "escrow_pruned_before_capture:301"]


_STAND_IN = """
CREATE VIEW api.restitution_impact AS SELECT * FROM (VALUES
  -- epoch, host, n, missed, invalid, d_missed, d_invalid, dt_pass, dt_pass_wo, llr, llr_wo, threshold, crossed, crossed_wo
  (410::bigint, 'gonka1near', 200::bigint, 3::bigint, 9::bigint, 0::bigint, 4::bigint, true, true,
   3.5::numeric, 1.2::numeric, 4.4::numeric, false, false),
  (410, 'gonka1over', 200, 3, 12, 0, 5, true, true, 4.9, 2.0, 4.4, true, false),
  (410, 'gonka1far', 200, 3, 4, 0, 1, true, true, 1.0, 0.5, 4.4, false, false),
  (410, 'gonka1own', 200, 3, 12, 0, 0, true, true, 4.0, 4.0, 4.4, false, false),
  (410, 'gonka1down', 200, 40, 0, 9, 0, false, true, 0, 0, 4.4, false, false),
  (410, 'gonka1downanyway', 200, 60, 0, 2, 0, false, false, 0, 0, 4.4, false, false)
) AS t(epoch_index, participant, inference_count, missed, invalid, disputable_missed, disputable_invalid,
       downtime_passes, downtime_passes_without_disputable, sprt_max_llr, sprt_max_llr_without_disputable,
       sprt_threshold, sprt_crossed, sprt_crossed_without_disputable)
CROSS JOIN LATERAL (SELECT invalid - disputable_invalid AS validated, NULL::text AS excluded_reason,
                           NULL::bigint AS confirmation_weight, NULL::bigint AS total_weight,
                           1000::numeric AS theoretical_epoch_reward, 250::numeric AS reward_at_stake,
                           true AS restitution_candidate) x
"""


def test_sprt_and_downtime_rules_against_the_contract_columns(conn):
    """Runs now, on a stand-in view with the interface's column names and made-up values: the early warning fires
    for a host within 3/4 of its threshold whose disputable invalidations contribute, critical when they alone
    crossed it; the downtime rule only when the test would pass without the disputable misses."""
    # this test's own database: the stand-in replaces the real view, whose values the next test checks
    conn.execute("DROP VIEW IF EXISTS api.restitution_impact CASCADE")
    conn.execute(_STAND_IN)
    sprt = {a.participant: a for a in run_rule(conn, RULES["sprt_within_reach"])}
    assert set(sprt) == {"gonka1near", "gonka1over"}
    assert (sprt["gonka1near"].severity, sprt["gonka1over"].severity) == ("warning", "critical")
    assert "crossed only because of them" in sprt["gonka1over"].summary
    assert sprt["gonka1near"].details["disputable_invalid"] == 4
    down = run_rule(conn, RULES["downtime_by_disputable"])
    assert [(a.alert_key, a.severity) for a in down] == [("downtime_by_disputable:410:gonka1down", "critical")]
    # the downtime test's total is inference_count + missed: 40 missed of 240 requests, not "of 200"
    assert down[0].summary.endswith("(40 missed of 240 requests)")


def test_restitution_rules_run_on_the_real_view(db_url, tmp_path):
    path = tmp_path / "s.ndjson"
    write_ndjson(str(path), generate(seed=5, escrows=4, inferences=150, mix="adversarial"))
    ingest(db_url, path, rules=True)
    with psycopg.connect(db_url) as conn:
        s = evaluate(conn, [RULES["sprt_within_reach"], RULES["downtime_by_disputable"]], [], Policy(),
                     now=None)
        assert s.skipped == {}
        for alert in run_rule(conn, RULES["sprt_within_reach"]):
            assert alert.details["disputable_invalid"] > 0
            assert alert.details["sprt_max_llr"] * 4 >= alert.details["sprt_threshold"] * 3


def test_packaged_rules_evaluate_without_error_apart_from_missing_views(db_url, tmp_path):
    path = tmp_path / "s.ndjson"
    write_ndjson(str(path), generate(seed=5, escrows=2, inferences=60, mix="adversarial"))
    ingest(db_url, path, rules=True)
    with psycopg.connect(db_url) as conn:
        s = evaluate(conn, list(RULES.values()), ["webhook:x"], Policy(cooldown=timedelta(0)))
        assert s.skipped == {}
        assert s.firing > 0 and s.deliveries == s.notifications

"""The escrow_verification_failed alert: one alert per escrow whose log failed a verification check
(api.escrow_verification.failed_check), with the escrow, epoch, check, nonce and reason on one bounded line, escaped
by each chat channel; it resolves when the escrow passes. Verification rows are written directly (the stage that
writes them runs elsewhere), for escrows ingested through the real pipeline."""
from __future__ import annotations

from datetime import timedelta

import psycopg

from indexer.alerts.engine import Policy, evaluate
from indexer.alerts.messages import SLACK_TEXT_LIMIT, TELEGRAM_TEXT_LIMIT, slack_message, telegram_message
from indexer.alerts.rules import load_rules, run_rule
from tests.reports.test_restitution_db import small_escrow
from tests.support.helpers import set_verification
from tests.support.rules_kit import load

RULE = next(r for r in load_rules() if r.name == "escrow_verification_failed")
HOSTILE = "<!channel> *bold* `code` [link](http://x) &amp;\nFAKE ALERT line\u2028" + "long " * 400


def _escrows(db_url, tmp_path):
    load(db_url, tmp_path, small_escrow("7001", 500, invalid=1, served=3)
         + small_escrow("7002", 500, invalid=1, served=3) + small_escrow("7003", 501, invalid=0, served=3))


def test_one_alert_per_failed_escrow_with_check_nonce_and_a_bounded_reason(db_url, tmp_path, conn):
    _escrows(db_url, tmp_path)
    assert run_rule(conn, RULE) == []  # nothing verified: nothing failed
    set_verification(conn, "7001", "signed", "replayed", 12, HOSTILE)
    set_verification(conn, "7002", "replayed", "settled", None, "host signatures reach 2 of the quorum's 3")
    set_verification(conn, "7003", "settled")
    alerts = {a.alert_key: a for a in run_rule(conn, RULE)}
    assert set(alerts) == {"escrow_verification_failed:7001", "escrow_verification_failed:7002"}
    a, b = alerts["escrow_verification_failed:7001"], alerts["escrow_verification_failed:7002"]
    assert (a.severity, a.participant, a.epoch_index, b.epoch_index) == ("critical", None, 500, 500)
    assert b.summary == ("escrow 7002 (epoch 500) failed the settled check: host signatures reach 2 of the "
                         "quorum's 3")
    assert a.summary.startswith("escrow 7001 (epoch 500) failed the replayed check at nonce 12: <!channel> *bold* "
                                "`code` [link](http://x) &amp; FAKE ALERT line\u2028long long")
    assert "\n" not in a.summary and a.summary.endswith("…") and len(a.summary) <= 400
    assert (a.details["check"], a.details["nonce"], a.details["level"]) == ("replayed", 12, "signed")
    assert a.details["reason"] == HOSTILE[:2000]
    body = {"rule": a.rule, "alert_key": a.alert_key, "severity": a.severity, "status": "firing",
            "summary": a.summary}
    slack = slack_message(body)
    assert "<!channel>" not in slack["text"] and "&lt;!channel&gt;" in slack["text"]
    assert "&amp;amp;" in slack["text"] and "\u2028" not in slack["text"] and len(slack["text"]) <= SLACK_TEXT_LIMIT
    telegram = telegram_message("42", body)["text"]
    assert telegram.count("\n") == 1 and "\u2028" not in telegram and len(telegram) <= TELEGRAM_TEXT_LIMIT


def test_a_long_escrow_id_is_bounded_and_keys_stay_distinct(db_url, tmp_path, conn):
    long_ids = ["1" * 119 + "1", "1" * 119 + "2"]  # the loader takes ids up to 128 characters; same first 100
    load(db_url, tmp_path, [r for e in long_ids for r in small_escrow(e, 502, invalid=0, served=2)])
    for escrow in long_ids:
        set_verification(conn, escrow, "none", "signed", 1, "user signature recovers to another address")
    alerts = run_rule(conn, RULE)
    assert len({a.alert_key for a in alerts}) == 2 and all(len(a.alert_key) < 200 for a in alerts)
    assert all(a.summary.startswith("escrow " + "1" * 60 + "…") for a in alerts)


def test_fires_once_and_resolves_when_the_escrow_passes(db_url, tmp_path, conn):
    _escrows(db_url, tmp_path)
    set_verification(conn, "7001", "none", "signed", 3, "user signature recovers to gonka1other, not the creator")
    policy = Policy(resolve_after=1, cooldown=timedelta(hours=1))
    with psycopg.connect(db_url) as c:
        first = evaluate(c, [RULE], ["webhook:x"], policy)
        again = evaluate(c, [RULE], ["webhook:x"], policy)
    assert (first.new, first.firing, first.notifications) == (1, 1, 1)
    assert (again.new, again.firing, again.notifications) == (0, 1, 0)  # still failing: no second notification
    set_verification(conn, "7001", "settled")
    with psycopg.connect(db_url) as c:
        passed = evaluate(c, [RULE], ["webhook:x"], policy)
    assert (passed.resolved, passed.firing) == (1, 0)
    assert conn.execute("SELECT alert_key, status FROM api.alerts").fetchall() == [
        ("escrow_verification_failed:7001", "resolved")]

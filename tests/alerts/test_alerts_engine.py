"""Alert state per key: firing, hysteresis before resolving, cooldown between notifications, silences, and the
outbox written in the same transaction as the state change. Real PostgreSQL; time is passed in, never slept."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from indexer.alerts.engine import Policy, evaluate, silence
from indexer.alerts.rules import Rule
from tests.support.alerts_kit import PROBE, T0, make_probe

CH = ["webhook:a", "webhook:b"]
POLICY = Policy(resolve_after=3, cooldown=timedelta(hours=1))


def _eval(conn, at, rules=(PROBE,), channels=CH):
    return evaluate(conn, list(rules), channels, POLICY, now=T0 + at)


def _notifications(conn):
    return conn.execute("SELECT alert_key, status, payload->>'summary' FROM alert.notification "
                        "ORDER BY notification_id").fetchall()


@pytest.fixture
def db(conn):
    make_probe(conn)
    return conn


def test_new_alert_notifies_every_channel_once_with_its_own_key(db):
    db.execute("INSERT INTO public.probe (k, participant, epoch_index) VALUES ('x', 'gonka1hostA', 7)")
    s = _eval(db, timedelta(0))
    assert (s.new, s.firing, s.notifications, s.deliveries) == (1, 1, 1, 2)
    _eval(db, timedelta(minutes=1))
    _eval(db, timedelta(minutes=2))
    assert _notifications(db) == [("probe:x", "firing", "probe x a")]
    rows = db.execute("SELECT channel, idempotency_key, status FROM api.alert_deliveries ORDER BY channel").fetchall()
    assert [r[0] for r in rows] == CH and rows[0][1] != rows[1][1] and {r[2] for r in rows} == {"pending"}
    body = db.execute("SELECT payload FROM alert.notification").fetchone()[0]
    assert set(body) == {"alert_key", "rule", "severity", "status", "participant", "epoch_index", "summary",
                         "details", "fired_at"}
    assert (body["participant"], body["epoch_index"], body["details"]) == ("gonka1hostA", 7, {"v": "a"})
    alert = db.execute("SELECT rule, severity, status, first_fired_at, last_evaluated_at FROM api.alerts").fetchone()
    assert alert == ("probe", "warning", "firing", T0, T0 + timedelta(minutes=2))


def test_resolves_only_after_being_absent_for_resolve_after_evaluations(db):
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    _eval(db, timedelta(0))
    db.execute("DELETE FROM public.probe")
    _eval(db, timedelta(minutes=1))
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")  # back before the hysteresis ran out: absence resets
    _eval(db, timedelta(minutes=2))
    db.execute("DELETE FROM public.probe")
    for minute in (3, 4):
        _eval(db, timedelta(minutes=minute))
        assert db.execute("SELECT status FROM api.alerts").fetchone()[0] == "firing"
    s = _eval(db, timedelta(minutes=5))
    assert s.resolved == 1
    assert db.execute("SELECT status, resolved_at FROM api.alerts").fetchone() == ("resolved", T0 + timedelta(minutes=5))
    assert [n[1] for n in _notifications(db)] == ["firing", "resolved"]  # the flicker was never notified


def test_cooldown_holds_back_changes_and_refiring_but_never_drops_them(db):
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    _eval(db, timedelta(0))
    db.execute("UPDATE public.probe SET v = 'b'")
    _eval(db, timedelta(minutes=30))  # changed summary within the cooldown: held back
    assert len(_notifications(db)) == 1
    _eval(db, timedelta(minutes=61))
    assert _notifications(db)[-1] == ("probe:x", "firing", "probe x b")
    db.execute("DELETE FROM public.probe")
    for minute in (62, 63, 64):
        _eval(db, timedelta(minutes=minute))
    assert _notifications(db)[-1][1] == "resolved"  # a resolution is not held back
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    _eval(db, timedelta(minutes=70))  # fires again 6 minutes after the last notification
    assert len(_notifications(db)) == 3
    assert db.execute("SELECT status, first_fired_at FROM api.alerts").fetchone() == (
        "firing", T0 + timedelta(minutes=70))
    _eval(db, timedelta(minutes=125))  # cooldown over: the new firing is told
    assert _notifications(db)[-1][:2] == ("probe:x", "firing") and len(_notifications(db)) == 4


def test_silence_by_rule_or_key_holds_notifications_until_it_ends(db):
    db.execute("INSERT INTO public.probe (k) VALUES ('x'), ('y')")
    silence(db, "probe", timedelta(minutes=30), "maintenance", now=T0)
    silence(db, "probe:y", timedelta(hours=2), now=T0)
    _eval(db, timedelta(minutes=1))
    assert _notifications(db) == []
    assert db.execute("SELECT count(*) FROM api.alerts WHERE status = 'firing'").fetchone()[0] == 2
    _eval(db, timedelta(minutes=31))  # the rule's silence ended; y's own silence still holds
    assert [n[0] for n in _notifications(db)] == ["probe:x"]
    _eval(db, timedelta(hours=2, minutes=1))
    assert [n[0] for n in _notifications(db)] == ["probe:x", "probe:y"]


def test_state_and_outbox_commit_together_or_not_at_all(db, db_url):
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    with psycopg.connect(db_url) as other:
        with pytest.raises(RuntimeError), db.transaction():
            _eval(db, timedelta(0))  # the evaluation's transaction is a savepoint of this one
            seen = other.execute("SELECT (SELECT count(*) FROM alert.state), (SELECT count(*) FROM alert.delivery)")
            assert seen.fetchone() == (0, 0)  # nothing visible before commit
            raise RuntimeError("crash after the state change")
        assert other.execute("SELECT (SELECT count(*) FROM alert.state), (SELECT count(*) FROM alert.notification)"
                             ).fetchone() == (0, 0)
    _eval(db, timedelta(minutes=1))
    assert len(_notifications(db)) == 1


def test_a_rule_that_cannot_run_is_skipped_and_its_alerts_left_as_they_were(db):
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    _eval(db, timedelta(0))
    gone = Rule("probe", Path("probe.sql"), "SELECT * FROM api.not_there_yet")
    bad = Rule("bad", Path("/rules/bad.sql"), "SELECT 'other:1' AS alert_key, 'warning' AS severity, NULL::text AS "
               "participant, NULL::bigint AS epoch_index, 's' AS summary, '{}'::jsonb AS details")
    for minute in range(1, 6):
        s = _eval(db, timedelta(minutes=minute), rules=(gone, bad))
    assert "api.not_there_yet" in s.skipped["probe"]
    assert "/rules/bad.sql" in s.skipped["bad"] and "must start with the rule's name" in s.skipped["bad"]
    assert db.execute("SELECT status FROM api.alerts").fetchone()[0] == "firing"  # absence could not be judged


def test_several_rules_and_no_channel_still_keep_state_and_outbox(db):
    db.execute("INSERT INTO public.probe (k, severity) VALUES ('x', 'critical'), ('y', 'info')")
    s = _eval(db, timedelta(0), channels=[])
    assert (s.firing, s.notifications, s.deliveries) == (2, 2, 0)
    db.execute("INSERT INTO public.probe (k, severity) VALUES ('z', 'loud')")
    s = _eval(db, timedelta(minutes=1))
    assert "severity 'loud'" in s.skipped["probe"]


def test_an_alert_is_logged_as_one_bounded_line_whatever_its_values(db, caplog):
    """The key and summary carry a participant a peer chose: a line break would forge a log line, a megabyte would
    flood the log."""
    db.execute("INSERT INTO public.probe (k, v) VALUES (%s, %s)",
               ("x\nINFO alert probe:y resolved: all good\x1b[2J", "\u202e" + "z" * 1_000_000))
    with caplog.at_level("INFO", logger="indexer.alerts.engine"):
        _eval(db, timedelta(0))
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("alert ")]
    assert not any(c in line for c in "\n\r\x1b\u202e") and len(line) < 4000 and line.endswith("…")

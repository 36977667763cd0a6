"""One alert evaluation: run the rules, update the state per alert key, and write the notifications that follow to
the outbox, all in one transaction (so a notification exists if and only if its state change does).

State per key: ``firing`` while the rule returns it; ``resolved`` once it has been absent for
``Policy.resolve_after`` consecutive evaluations (hysteresis: a key that flickers does not flap). What the receivers
were last told is kept beside the state (``notified_status``, ``notified_summary``); a notification is written when
they differ from the state and no silence covers the key or its rule. A ``firing`` notification (first, changed
summary, or firing again) waits until ``Policy.cooldown`` has passed since the key's previous notification; a
``resolved`` notification is written at once, and only for keys the receivers were told were firing.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Sequence

import psycopg
from psycopg.types.json import Jsonb

from indexer.alerts.messages import KEY_LIMIT, SLACK_TEXT_LIMIT, fit, plain
from indexer.alerts.rules import Alert, Rule, evaluate_rules

log = logging.getLogger(__name__)

ALERTS_LOCK_KEY = 0x616C65727473  # 'alerts': one evaluation at a time per database, however many processes run


@dataclass(frozen=True)
class Policy:
    resolve_after: int = 3                   # consecutive evaluations without the key before it resolves
    cooldown: timedelta = timedelta(hours=1)  # at least this long between two notifications of one key (firing)


@dataclass
class EvaluationSummary:
    rules: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    firing: int = 0
    new: int = 0
    resolved: int = 0
    notifications: int = 0
    deliveries: int = 0
    at: datetime | None = None


_UPSERT = """
INSERT INTO alert.state AS s (alert_key, rule, severity, status, participant, epoch_index, summary, details,
                              first_fired_at, last_seen_at, last_evaluated_at, absent_evaluations)
VALUES (%(alert_key)s, %(rule)s, %(severity)s, 'firing', %(participant)s, %(epoch_index)s, %(summary)s,
        %(details)s, %(now)s, %(now)s, %(now)s, 0)
ON CONFLICT (alert_key) DO UPDATE SET
    severity = excluded.severity, participant = excluded.participant, epoch_index = excluded.epoch_index,
    summary = excluded.summary, details = excluded.details,
    first_fired_at = CASE WHEN s.status = 'resolved' THEN excluded.first_fired_at ELSE s.first_fired_at END,
    status = 'firing', resolved_at = NULL, absent_evaluations = 0,
    last_seen_at = excluded.last_seen_at, last_evaluated_at = excluded.last_evaluated_at
RETURNING (xmax = 0) AS inserted
"""

_ABSENT = """
UPDATE alert.state SET absent_evaluations = absent_evaluations + 1, last_evaluated_at = %(now)s,
       status = CASE WHEN absent_evaluations + 1 >= %(resolve_after)s THEN 'resolved' ELSE status END,
       resolved_at = CASE WHEN absent_evaluations + 1 >= %(resolve_after)s THEN %(now)s END
WHERE rule = ANY(%(rules)s) AND status = 'firing' AND NOT (alert_key = ANY(%(present)s))
RETURNING status
"""

# keys whose receivers have not been told their current state, and no live silence covers them
_TO_NOTIFY = """
SELECT alert_key, rule, severity, status, participant, epoch_index, summary, details, first_fired_at
FROM alert.state s
WHERE ((status = 'firing' AND (notified_status IS DISTINCT FROM 'firing' OR notified_summary IS DISTINCT FROM summary)
        AND (last_notified_at IS NULL OR last_notified_at <= %(now)s - %(cooldown)s))
    OR (status = 'resolved' AND notified_status = 'firing'))
  AND NOT EXISTS (SELECT 1 FROM alert.silence x
                  WHERE x.ends_at > %(now)s AND (x.alert_key = s.alert_key OR x.rule = s.rule))
ORDER BY alert_key
FOR UPDATE
"""


def payload(row: tuple) -> dict:
    """The webhook body of interface.md §4."""
    key, rule, severity, status, participant, epoch, summary, details, fired_at = row
    return {"alert_key": key, "rule": rule, "severity": severity, "status": status, "participant": participant,
            "epoch_index": epoch, "summary": summary, "details": details, "fired_at": fired_at.isoformat()}


def evaluate(conn: psycopg.Connection, rules: Sequence[Rule], channels: Sequence[str], policy: Policy = Policy(),
             now: datetime | None = None) -> EvaluationSummary:
    """Evaluate every rule once and write the resulting notifications (one delivery per channel name) in one
    transaction. ``now`` defaults to the database's clock."""
    summary = EvaluationSummary(rules=len(rules))
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (ALERTS_LOCK_KEY,))
        if now is None:
            now = conn.execute("SELECT now()").fetchone()[0]
        summary.at = now
        results, summary.skipped = evaluate_rules(conn, list(rules))
        present = [a for alerts in results.values() for a in alerts]
        with conn.cursor() as cur:
            for alert in present:
                cur.execute(_UPSERT, _params(alert, now))
                summary.new += bool(cur.fetchone()[0])
            cur.execute(_ABSENT, {"now": now, "resolve_after": policy.resolve_after, "rules": list(results),
                                  "present": [a.alert_key for a in present]})
            summary.resolved = sum(1 for (status,) in cur.fetchall() if status == "resolved")
            summary.firing = cur.execute("SELECT count(*) FROM alert.state WHERE status = 'firing'").fetchone()[0]
            due = cur.execute(_TO_NOTIFY, {"now": now, "cooldown": policy.cooldown}).fetchall()
            for row in due:
                _notify(cur, row, channels, now)
            summary.notifications = len(due)
            summary.deliveries = len(due) * len(channels)
    return summary


def _params(alert: Alert, now: datetime) -> dict:
    return {"alert_key": alert.alert_key, "rule": alert.rule, "severity": alert.severity,
            "participant": alert.participant, "epoch_index": alert.epoch_index, "summary": alert.summary,
            "details": Jsonb(alert.details), "now": now}


def _notify(cur: psycopg.Cursor, row: tuple, channels: Sequence[str], now: datetime) -> None:
    key, status, summary = row[0], row[3], row[6]
    body = payload(row)
    cur.execute("INSERT INTO alert.notification (alert_key, status, payload, created_at) VALUES (%s, %s, %s, %s) "
                "RETURNING notification_id", (key, status, Jsonb(body), now))
    notification_id = cur.fetchone()[0]
    if channels:
        # the idempotency key is made once, here, and sent unchanged on every attempt of this delivery
        cur.execute("INSERT INTO alert.delivery (notification_id, channel, idempotency_key, next_attempt_at) "
                    "SELECT %s, channel, gen_random_uuid()::text, %s FROM unnest(%s::text[]) AS channel",
                    (notification_id, now, list(channels)))
    cur.execute("UPDATE alert.state SET notified_status = status, notified_summary = summary, last_notified_at = %s "
                "WHERE alert_key = %s", (now, key))
    # the key and summary carry a peer's values (a participant, a model id): one bounded line in the log
    log.info("alert %s %s: %s", fit(plain(key), KEY_LIMIT), status, fit(plain(summary), SLACK_TEXT_LIMIT))


def silence(conn: psycopg.Connection, target: str, duration: timedelta, reason: str = "",
            now: datetime | None = None) -> tuple[str, datetime]:
    """Silence an alert key (contains a colon) or a whole rule until now + duration; returns (kind, ends_at)."""
    kind = "alert_key" if ":" in target else "rule"
    with conn.transaction():
        if now is None:
            now = conn.execute("SELECT now()").fetchone()[0]
        ends = now + duration
        conn.execute(f"INSERT INTO alert.silence ({kind}, ends_at, reason, created_at) VALUES (%s, %s, %s, %s)",
                     (target, ends, reason, now))
    return kind, ends


def check_target(target: str, known_rules: Sequence[str]) -> None:
    """A silence names a known rule, or an alert key (``rule:...``) of one; else ValueError listing the rules."""
    rule = target.split(":", 1)[0]
    if rule not in known_rules:
        raise ValueError(f"unknown alert rule {rule!r} in {target!r}; known rules: {', '.join(sorted(known_rules))}")


def live_silences(conn: psycopg.Connection, now: datetime | None = None) -> list[tuple]:
    """(kind, target, ends_at, reason) of every silence not yet over, soonest end first."""
    return conn.execute("SELECT CASE WHEN alert_key IS NULL THEN 'rule' ELSE 'alert key' END, "
                        "coalesce(alert_key, rule), ends_at, reason FROM alert.silence "
                        "WHERE ends_at > coalesce(%s, now()) ORDER BY ends_at, silence_id", (now,)).fetchall()


def unsilence(conn: psycopg.Connection, target: str, now: datetime | None = None) -> int:
    """End now every live silence of exactly this alert key or rule; returns how many there were. The alerts they
    covered are notified at the next evaluation if the receivers have not heard their current state."""
    with conn.transaction():
        return conn.execute("UPDATE alert.silence SET ends_at = coalesce(%(now)s, now()) "
                            "WHERE ends_at > coalesce(%(now)s, now()) AND (alert_key = %(t)s OR rule = %(t)s)",
                            {"now": now, "t": target}).rowcount

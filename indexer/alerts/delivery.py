"""The delivery worker: send due outbox rows, record every attempt, retry with backoff until the receiver answers
2xx.

Crash safety: an attempt is *leased* first (its attempt count and ``next_attempt_at`` move forward in a committed
transaction), then sent, then recorded in a second transaction. A crash after sending and before recording leaves
the delivery pending with the lease's retry time, so it is sent again with the same ``Idempotency-Key``: at most a
repeat, never a loss. Leases also keep two workers (several ``indexer run`` processes) from sending one delivery at
the same time. Deliveries of one alert key to one channel go out in order: a later one waits for the earlier.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Mapping

import httpx
import psycopg

from indexer.alerts.channels import Channel

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Backoff:
    first: float = 5.0                            # seconds before the first retry; doubles per attempt
    cap: float = 300.0                            # never longer than this between attempts
    lease: float = 30.0                           # longer than one send (timeout) can take
    give_up_after: timedelta = timedelta(days=2)  # then the delivery is 'failed' (still listed, with its last error)
    timeout: float = 10.0

    def delay(self, attempts: int) -> timedelta:
        return timedelta(seconds=min(self.cap, self.first * 2 ** max(0, attempts - 1)))


@dataclass
class DeliverySummary:
    attempted: int = 0
    delivered: int = 0
    retrying: int = 0
    failed: int = 0


_LEASE = """
SELECT d.delivery_id, d.channel, d.idempotency_key, d.attempts + 1, n.payload, n.created_at
FROM alert.delivery d JOIN alert.notification n ON n.notification_id = d.notification_id
WHERE d.status = 'pending' AND d.next_attempt_at <= %(now)s AND d.channel = ANY(%(channels)s)
  AND NOT EXISTS (SELECT 1 FROM alert.delivery e JOIN alert.notification m ON m.notification_id = e.notification_id
                  WHERE e.channel = d.channel AND m.alert_key = n.alert_key AND e.status = 'pending'
                    AND e.delivery_id < d.delivery_id)
ORDER BY d.delivery_id
LIMIT 1
FOR UPDATE OF d SKIP LOCKED
"""


def deliver_due(url: str, channels: Mapping[str, Channel], *, backoff: Backoff = Backoff(),
                clock: Callable[[], datetime] = utcnow, client: httpx.Client | None = None,
                limit: int = 1000) -> DeliverySummary:
    """Send every delivery due now to a configured channel (at most ``limit`` attempts)."""
    summary = DeliverySummary()
    if not channels:
        return summary
    own = client is None
    client = client or httpx.Client(timeout=backoff.timeout)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            while summary.attempted < limit:
                leased = _lease(conn, list(channels), backoff, clock())
                if leased is None:
                    break
                summary.attempted += 1
                outcome = _attempt(conn, channels[leased[1]], client, leased, backoff, clock)
                setattr(summary, outcome, getattr(summary, outcome) + 1)
    finally:
        if own:
            client.close()
    return summary


def _lease(conn: psycopg.Connection, channels: list[str], backoff: Backoff, now: datetime):
    with conn.transaction():
        row = conn.execute(_LEASE, {"now": now, "channels": channels}).fetchone()
        if row is None:
            return None
        lease_until = now + max(backoff.delay(row[3]), timedelta(seconds=backoff.lease))
        conn.execute("UPDATE alert.delivery SET attempts = attempts + 1, next_attempt_at = %s WHERE delivery_id = %s",
                     (lease_until, row[0]))
    return row + (now,)


def _attempt(conn: psycopg.Connection, channel: Channel, client: httpx.Client, leased: tuple, backoff: Backoff,
             clock: Callable[[], datetime]) -> str:
    delivery_id, name, key, attempt, body, created_at, started = leased
    status, error = None, None
    try:
        response = channel.send(client, body, key)
        status = response.status_code
        if not 200 <= status < 300:
            error = f"HTTP {status}: {response.text[:200]}"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is not None:
        error = channel.scrub(error)
    finished = clock()
    if error is None:
        outcome, state, next_at = "delivered", "delivered", finished
    elif finished - created_at >= backoff.give_up_after:
        outcome, state, next_at = "failed", "failed", finished
    else:
        outcome, state, next_at = "retrying", "pending", finished + backoff.delay(attempt)
    with conn.transaction():
        conn.execute("INSERT INTO alert.delivery_attempt (delivery_id, attempt, started_at, finished_at, http_status, "
                     "error) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (delivery_id, attempt) DO NOTHING",
                     (delivery_id, attempt, started, finished, status, error))
        conn.execute("UPDATE alert.delivery SET status = %s, last_error = %s, next_attempt_at = %s, "
                     "delivered_at = CASE WHEN %s THEN %s::timestamptz END WHERE delivery_id = %s",
                     (state, error, next_at, state == "delivered", finished, delivery_id))
    if error is not None:
        log.warning("alert delivery %s to %s, attempt %s: %s", key, name, attempt, error)
    return outcome

"""The delivery worker: send due outbox rows, record every attempt, retry with backoff until the receiver answers
2xx.

Crash safety: an attempt is *leased* first (its attempt count and ``next_attempt_at`` move forward in a committed
transaction), then sent, then recorded in a second transaction. A crash after sending and before recording leaves
the delivery pending with the lease's retry time, so it is sent again with the same ``Idempotency-Key``: at most a
repeat, never a loss. Leases also keep two workers (several ``indexer run`` processes) from sending one delivery at
the same time: every send has a wall-clock deadline shorter than its lease (:mod:`indexer.alerts.posting`), so a
receiver that answers slowly makes the attempt fail and retry later, never outlive its lease. Each channel is worked
by its own thread and connection, so one slow receiver does not hold the others. Deliveries of one alert key to one
channel go out in order: a later one waits for the earlier.

Deliveries follow the channels of the worker that delivers, not of the evaluation that wrote the notification: each
pass first *enrolls* its channels (:data:`_ENROLL`), so notifications written by an evaluation without channels (the
poller's) or with other channels still reach every channel configured where delivery runs.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Mapping

import httpx
import psycopg

from indexer.alerts.channels import Channel
from indexer.alerts.messages import KEY_LIMIT, fit, plain
from indexer.alerts.posting import DeadlineExceeded

log = logging.getLogger(__name__)
ERROR_LIMIT = 300  # characters of a failed attempt's error (the receiver's answer is read up to 4 KiB)
# What a send raises when it fails: a network or protocol error (httpx.HTTPError), a URL the client refuses
# (httpx.InvalidURL and UnicodeError, from a host name that cannot be encoded, are no HTTPError), a stream used
# wrongly, the deadline. Each is that channel's failed attempt, retried like any other: it must not end the channel's
# thread and the pass (the delivery stays leased, the other channels' results are lost) or the `indexer run` loop.
_SEND_ERRORS = (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, UnicodeError, DeadlineExceeded)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Backoff:
    first: float = 5.0                            # seconds before the first retry; doubles per attempt
    cap: float = 300.0                            # never longer than this between attempts
    lease: float = 30.0                           # no other worker sends a leased delivery for this long
    give_up_after: timedelta = timedelta(days=2)  # then the delivery is 'failed' (still listed, with its last error)
    timeout: float = 10.0                         # each network operation (connect, write, one read)
    deadline: float = 20.0                        # one whole send, wall clock; shorter than the lease

    def __post_init__(self) -> None:
        if not 0 < self.deadline < self.lease:
            raise ValueError(f"a send's deadline ({self.deadline:g} s) must be shorter than its lease "
                             f"({self.lease:g} s), or a slow send outlives its lease and is sent twice")

    def delay(self, attempts: int) -> timedelta:
        return timedelta(seconds=min(self.cap, self.first * 2 ** max(0, attempts - 1)))


@dataclass
class DeliverySummary:
    attempted: int = 0
    delivered: int = 0
    retrying: int = 0
    failed: int = 0
    enrolled: int = 0  # deliveries this pass added for notifications written without its channels


# For each configured channel without a delivery of a key's latest notification: enroll it when the key is still
# firing (the channel gets what is firing now), or when the notification is a resolution and the last thing the
# channel was sent for that key was a firing (so it hears the end of what it heard begin). Older notifications are
# history, not news: a channel added later is not sent them.
_ENROLL = """
INSERT INTO alert.delivery (notification_id, channel, idempotency_key, next_attempt_at)
SELECT n.notification_id, c.channel, gen_random_uuid()::text, %(now)s
FROM alert.state s
CROSS JOIN LATERAL (SELECT m.notification_id, m.status FROM alert.notification m WHERE m.alert_key = s.alert_key
                    ORDER BY m.notification_id DESC LIMIT 1) n
CROSS JOIN unnest(%(channels)s::text[]) AS c (channel)
WHERE NOT EXISTS (SELECT 1 FROM alert.delivery d WHERE d.notification_id = n.notification_id AND d.channel = c.channel)
  AND ((n.status = 'firing' AND s.status = 'firing')
       OR (n.status = 'resolved'
           AND (SELECT m.status FROM alert.delivery d JOIN alert.notification m ON m.notification_id = d.notification_id
                WHERE m.alert_key = s.alert_key AND d.channel = c.channel
                ORDER BY m.notification_id DESC LIMIT 1) = 'firing'))
ON CONFLICT (notification_id, channel) DO NOTHING
"""


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
    """Enroll the configured channels, then send every delivery due now to them (at most ``limit`` attempts),
    one thread per channel."""
    summary = DeliverySummary()
    if not channels:
        return summary
    with psycopg.connect(url, autocommit=True) as conn:
        summary.enrolled = conn.execute(_ENROLL, {"now": clock(), "channels": list(channels)}).rowcount
    own = client is None
    client = client or httpx.Client(timeout=backoff.timeout)
    budget = _Budget(summary, limit)
    try:
        if len(channels) == 1:
            _work(url, next(iter(channels.values())), client, backoff, clock, budget)
        else:
            with ThreadPoolExecutor(max_workers=min(len(channels), 8), thread_name_prefix="alert-delivery") as pool:
                futures = [pool.submit(_work, url, c, client, backoff, clock, budget) for c in channels.values()]
                for future in futures:
                    future.result()
    finally:
        if own:
            client.close()
    return summary


class _Budget:
    """The pass's summary and attempt limit, shared by the channel threads."""

    def __init__(self, summary: DeliverySummary, limit: int) -> None:
        self.summary, self.limit, self._lock = summary, limit, threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.summary.attempted >= self.limit:
                return False
            self.summary.attempted += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self.summary.attempted -= 1

    def count(self, outcome: str) -> None:
        with self._lock:
            setattr(self.summary, outcome, getattr(self.summary, outcome) + 1)


def _work(url: str, channel: Channel, client: httpx.Client, backoff: Backoff, clock: Callable[[], datetime],
          budget: _Budget) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        while budget.take():
            leased = _lease(conn, [channel.name], backoff, clock())
            if leased is None:
                budget.give_back()
                return
            budget.count(_attempt(conn, channel, client, leased, backoff, clock))


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
        answer = channel.send(client, body, key, backoff.deadline)
        status = answer.status
        if not 200 <= status < 300:
            error = f"HTTP {status}: {answer.text}"
    except _SEND_ERRORS as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is not None:
        # the receiver's answer is a peer's text: credentials it echoed scrubbed (before the cut, which could split
        # one), then one line without control characters (a forged log line, a terminal escape) and bounded
        error = fit(plain(" ".join(channel.scrub(error).split())), ERROR_LIMIT)
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
        log.warning("alert delivery %s to %s, attempt %s: %s", fit(plain(key), KEY_LIMIT), name, attempt, error)
    return outcome

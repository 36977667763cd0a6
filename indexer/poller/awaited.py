"""Payloads asked again: 0/0 Finishes stored without their response payload (``net.awaited_payload``).

A refusal's kind is read from its stored response payload, and no member of the group may serve it when its diff
is fetched: a host briefly down, a member that has not stored it yet, an operator key the hosts accept only later.
Such a Finish is stored without its payload and, in the same transaction (:meth:`EscrowCommitter._commit
<indexer.poller.commit.EscrowCommitter._commit>`), remembered here. Each cycle then re-asks a bounded batch of the
rows that are due (oldest due first), whether or not the escrow's log is final:

* a row is first due in the next cycle, then after a backoff that doubles from ``backoff`` seconds (default 60 s)
  up to 6 hours; never twice in one cycle (a row attempted since the cycle began is not due);
* a poller claims its batch (``claimed_by``, ``claimed_until``) with ``FOR UPDATE SKIP LOCKED``: several pollers on
  one database never ask for one awaited payload at once. A batch that fails with an error counts the attempt of
  each of its rows (so a failure that repeats ends in a give-up) and gives the claims back; an interrupted one gives
  them back untouched; a killed poller's claims expire after ``CLAIM_SECONDS``. The row goes only when the payload
  commits;
* a payload obtained is loaded as the Finish record with its ``response_payload`` through the normal load path (the
  record is amended, its escrow marked dirty, and replay and rules re-evaluate it), and its row is deleted in the
  same transaction;
* after ``attempts`` attempts (default 16: about two days with the default backoff) the row is given up: it stays,
  with ``given_up_at`` and its last error (``api.awaited_payloads``), a ``net.failure`` row of source
  ``payload:<escrow>/<inference>`` says so (``api.source_errors``), and it is never asked again.
"""
from __future__ import annotations

import json
import logging
from concurrent.futures import Executor
from dataclasses import dataclass

import psycopg

from indexer.poller.payloads import Asked, ask_members
from indexer.wire.normalize import dumps_record_bytes

log = logging.getLogger(__name__)

DEFAULT_ATTEMPTS = 16       # attempts before a payload is given up (the escrow fetch is the first)
DEFAULT_BACKOFF = 60.0      # seconds before the third attempt; doubled for each one after, up to BACKOFF_MAX
BACKOFF_MAX = 6 * 3600.0
BATCH = 256                 # awaited payloads one poller asks per cycle
CLAIM_SECONDS = 600.0       # a claim not committed or given back by then (a killed poller) may be taken again


@dataclass(frozen=True)
class Awaited:
    """A 0/0 Finish no member served the payload of: its NDJSON line as stored, and the last member's failure."""
    escrow_id: str
    inference_id: int
    epoch: int
    version: str
    line: bytes
    error: str


@dataclass(frozen=True)
class AwaitPolicy:
    """How missing payloads are asked again: ``attempts`` in all (at least 2: the escrow fetch is the first),
    ``backoff`` seconds before the third, doubled after each; ``batch`` rows a poller asks per cycle."""
    attempts: int = DEFAULT_ATTEMPTS
    backoff: float = DEFAULT_BACKOFF
    batch: int = BATCH
    claim_seconds: float = CLAIM_SECONDS

    def __post_init__(self) -> None:
        if self.attempts < 2 or self.batch < 1 or self.backoff < 0 or not self.claim_seconds > 0:
            raise ValueError(f"payload retry policy out of range: {self}")


_REMEMBER = """
INSERT INTO net.awaited_payload (escrow_id, inference_id, epoch_index, protocol_version, record, last_error,
                                 next_attempt_at)
VALUES (%s, %s, %s, %s, %s, %s, now())
ON CONFLICT (escrow_id, inference_id) DO NOTHING"""

_CLAIM = """
WITH due AS (
    SELECT escrow_id, inference_id FROM net.awaited_payload
    WHERE given_up_at IS NULL AND next_attempt_at <= now() AND last_attempt_at < %(since)s
      AND (claimed_until IS NULL OR claimed_until < now())
    ORDER BY next_attempt_at, escrow_id, inference_id
    LIMIT %(n)s FOR UPDATE SKIP LOCKED)
UPDATE net.awaited_payload a SET claimed_by = %(h)s, claimed_until = now() + make_interval(secs => %(s)s)
FROM due WHERE a.escrow_id = due.escrow_id AND a.inference_id = due.inference_id
RETURNING a.escrow_id, a.inference_id, a.epoch_index, a.protocol_version, a.record"""

_RELEASE = """
UPDATE net.awaited_payload SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = %s"""

_OBTAINED = """
DELETE FROM net.awaited_payload a
USING unnest(%s::text[], %s::bigint[]) AS o(escrow_id, inference_id)
WHERE a.escrow_id = o.escrow_id AND a.inference_id = o.inference_id"""

# one more attempt failed: the next one after the backoff, or given up (and said in net.failure) after the last
_MISSED = """
WITH missed AS (
    UPDATE net.awaited_payload a SET attempts = a.attempts + 1, last_attempt_at = now(), last_error = m.error,
        next_attempt_at = now() + make_interval(
            secs => least(%(cap)s, %(base)s * power(2, least(a.attempts - 1, 30)))),
        given_up_at = CASE WHEN a.attempts + 1 >= %(max)s THEN now() END,
        claimed_by = NULL, claimed_until = NULL
    FROM unnest(%(e)s::text[], %(i)s::bigint[], %(err)s::text[]) AS m(escrow_id, inference_id, error)
    WHERE a.escrow_id = m.escrow_id AND a.inference_id = m.inference_id AND a.claimed_by = %(h)s
    RETURNING a.escrow_id, a.inference_id, a.attempts, a.given_up_at, a.last_error)
INSERT INTO net.failure (source, url, error, transient)
SELECT 'payload:' || escrow_id || '/' || inference_id, '',
       left('response payload given up after ' || attempts || ' attempts: ' || coalesce(last_error, ''), 2000), false
FROM missed WHERE given_up_at IS NOT NULL
RETURNING source"""


def remember(conn: psycopg.Connection, awaited: list[Awaited]) -> None:
    """Rows for Finishes stored without their payload, inside the transaction that stores them."""
    if awaited:
        with conn.cursor() as cur:
            cur.executemany(_REMEMBER, [(a.escrow_id, a.inference_id, a.epoch, a.version, a.line.decode(),
                                         a.error[:2000]) for a in awaited])


@dataclass
class Claimed:
    escrow_id: str
    inference_id: int
    epoch: int
    version: str
    record: str

    def response_hash(self) -> str | None:
        """The stored Finish's ``response_hash`` (hex), which a payload served for it must hash to."""
        found = json.loads(self.record).get("response_hash")
        return found if isinstance(found, str) else None


class AwaitedPayloads:
    """One cycle's re-asking of due awaited payloads, by the poller whose lease holder id is ``holder``."""

    def __init__(self, gonka, store, *, holder: str, since, validator: str, policy: AwaitPolicy,
                 pool: Executor | None = None) -> None:
        self.g, self.store, self.holder, self.since = gonka, store, holder, since
        self.validator, self.policy, self.pool = validator, policy, pool
        self.asked = self.obtained = self.given_up = 0

    def claim(self) -> list[Claimed]:
        """Claim up to ``policy.batch`` due rows no other poller holds (oldest due first)."""
        rows = self.store.conn.execute(_CLAIM, {"since": self.since, "n": self.policy.batch, "h": self.holder,
                                                "s": self.policy.claim_seconds}).fetchall()
        return [Claimed(e, int(i), int(ep), v, r) for e, i, ep, v, r in rows]

    def ask(self, claimed: list[Claimed]) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], str]]:
        """Each claimed row's escrow group asked for it: (payloads obtained, last errors of the others), keyed by
        (escrow id, inference id)."""
        by_escrow: dict[tuple[str, str, int], dict[int, str | None]] = {}
        for c in claimed:  # each payload checked against the response hash of the Finish stored with the row
            by_escrow.setdefault((c.escrow_id, c.version, c.epoch), {})[c.inference_id] = c.response_hash()
        slots = self.store.stored_slots(sorted({e for e, _, _ in by_escrow}))

        def one(item) -> tuple[str, dict[int, str | None], Asked]:
            (escrow_id, version, epoch), wanted = item
            members = slots.get(escrow_id, [])
            return escrow_id, wanted, ask_members(self.g, members, version, escrow_id, wanted, epoch,
                                                  validator=self.validator, report=self.store.fail)

        items = list(by_escrow.items())
        found: dict[tuple[str, int], str] = {}
        errors: dict[tuple[str, int], str] = {}
        for escrow_id, ids, asked in (map(one, items) if self.pool is None else self.pool.map(one, items)):
            for iid in ids:
                if iid in asked.found:
                    found[(escrow_id, iid)] = asked.found[iid]
                else:
                    errors[(escrow_id, iid)] = asked.errors.get(iid) or "the escrow's group is not stored"
        self.asked += len(claimed)
        return found, errors

    def commit(self, claimed: list[Claimed], found: dict[tuple[str, int], str],
               errors: dict[tuple[str, int], str]) -> None:
        """Payloads obtained loaded as their Finish records (the normal load path: amended, escrow dirty) with
        their rows deleted; the others' attempt counted, or given up: one transaction."""
        lines, got, missed = [], [], []
        for c in claimed:
            key = (c.escrow_id, c.inference_id)
            if key in found:
                rec = json.loads(c.record)
                rec["response_payload"] = found[key]
                lines.append(dumps_record_bytes(rec))
                got.append(key)
            else:
                missed.append((key, errors[key][:2000]))
        given_up: list = []

        def outcome(conn: psycopg.Connection) -> None:
            if got:
                conn.execute(_OBTAINED, ([e for e, _ in got], [i for _, i in got]))
            if missed:
                p = self.policy
                given_up[:] = conn.execute(_MISSED, {
                    "cap": BACKOFF_MAX, "base": p.backoff, "max": p.attempts, "h": self.holder,
                    "e": [e for (e, _), _ in missed], "i": [i for (_, i), _ in missed],
                    "err": [err for _, err in missed]}).fetchall()

        uri = "devshard:payloads/" + ",".join(dict.fromkeys(e for e, _ in got))
        self.store.load_many([(lines, uri)] if lines else [], None, after=outcome)
        self.obtained += len(got)
        self.given_up += len(given_up)
        for (source,) in given_up:
            log.warning("%s: response payload given up", source)

    def run(self) -> None:
        """Claim, ask and commit one batch. A batch that fails with an error counts an attempt for each claimed row
        (with the error: a failure that repeats ends in a give-up like any other) and raises it; one interrupted
        (KeyboardInterrupt, a cancelled cycle) gives its claims back untouched."""
        claimed = self.claim()
        if not claimed:
            return
        try:
            self.commit(claimed, *self.ask(claimed))
        except Exception as exc:
            self._count_failed(claimed, f"awaited payloads: the batch failed: {type(exc).__name__}: {exc}")
            raise
        except BaseException:
            self._give_back()
            raise

    def _count_failed(self, claimed: list[Claimed], error: str) -> None:
        """One attempt counted for each claimed row, ``error`` its last error (given up after the last)."""
        p = self.policy
        try:
            with self.store.conn.transaction():
                given_up = self.store.conn.execute(_MISSED, {
                    "cap": BACKOFF_MAX, "base": p.backoff, "max": p.attempts, "h": self.holder,
                    "e": [c.escrow_id for c in claimed], "i": [c.inference_id for c in claimed],
                    "err": [error[:2000]] * len(claimed)}).fetchall()
        except psycopg.Error as exc:
            log.warning("awaited payloads: the failed attempt not counted: %s", exc)
            self._give_back()
            return
        self.given_up += len(given_up)

    def _give_back(self) -> None:
        try:  # asked again by whoever comes next (a dropped connection lets the claims expire)
            self.store.conn.execute(_RELEASE, (self.holder,))
        except psycopg.Error as exc:
            log.warning("awaited payloads: claims not given back (they expire): %s", exc)

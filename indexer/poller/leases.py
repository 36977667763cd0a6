"""Work leases: several ``indexer run`` processes on one database split a cycle's work through ``net.lease``.

A lease names one unit of work:

* ``epoch:<E>`` — the chain-level work of epoch E in a cycle: its snapshot, its host epoch stats and finality
  state (after its escrows), or its pruning;
* ``escrow:<id>`` — one escrow's log fetch and commit (rows, cursors, host stats of that escrow).

A poller (holder ``hostname:pid:random``) takes a lease with one statement: the ``INSERT … ON CONFLICT DO UPDATE
… WHERE`` only succeeds when the row is free (released before this cycle began), expired (the database clock
judges: ``expires_at < now()``), or already ours. A heartbeat thread renews what the poller holds every
``seconds / 3``; finished work is released (``released_at``). A poller killed with SIGKILL releases nothing: its
leases expire and another poller takes them over (``takeovers`` + 1, ``taken_from`` = the dead holder, kept while
the taker holds the lease, a take it runs again included).

The heartbeat renews only while the poller makes progress (an HTTP answer or failure, a lease taken, looked at or
released, a fenced commit) at least every ``stall_seconds``: a poller wedged with a live heartbeat thread would
otherwise hold its work for ever; its leases expire like a dead one's.

A lease released *after* this poller's cycle began means another poller did that work during this cycle: it is
``done``, not taken again, so the same work is not repeated within a cycle.

Fencing: every commit of leased work checks, inside its own transaction, that this holder still holds the leases
(row locks on ``net.lease``, taken in resource order), and as it ends runs them a whole lease length from then. The
heartbeat skips rows a commit has locked rather than wait for it, so a long commit never lets the poller's other
leases expire. A poller that paused past its lease and was taken over fails the check and rolls back
(:class:`LeaseLost`): a stale poller never writes, and whoever took over resumes from the committed cursors.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

import psycopg

from indexer.db.durability import commit_without_flush_wait

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 60.0
STALL_LEASES = 5              # no progress for this many lease lengths (at least STALL_MIN_SECONDS): stop renewing
STALL_MIN_SECONDS = 60.0

_TAKE = """
INSERT INTO net.lease AS l (resource, holder, acquired_at, renewed_at, expires_at)
VALUES (%(r)s, %(h)s, now(), now(), now() + make_interval(secs => %(s)s))
ON CONFLICT (resource) DO UPDATE SET
    holder = excluded.holder, acquired_at = now(), renewed_at = now(), expires_at = excluded.expires_at,
    released_at = NULL,
    takeovers = l.takeovers + CASE WHEN l.released_at IS NULL AND l.holder <> excluded.holder THEN 1 ELSE 0 END,
    -- a take by the lease's own holder keeps whom it was taken from: the same take run again on a reopened
    -- connection (Leases._execute) after the first run committed unseen must still report the takeover
    taken_from = CASE WHEN l.released_at IS NULL AND l.holder <> excluded.holder THEN l.holder
                      WHEN l.released_at IS NULL AND l.holder = excluded.holder THEN l.taken_from END
WHERE (l.holder = excluded.holder AND l.released_at IS NULL)
   OR (l.released_at IS NULL AND l.expires_at < now())
   OR (l.released_at IS NOT NULL AND l.released_at < %(since)s)
RETURNING taken_from"""

# why a take failed, or where a skipped lease stands now: 'done' (released during this cycle), 'free' (expired or
# released before this cycle: may be taken), 'held' (another holder's live lease)
_STATUS = """
SELECT resource, holder,
       CASE WHEN released_at IS NOT NULL AND released_at >= %(since)s THEN 'done'
            WHEN released_at IS NOT NULL OR expires_at < now() THEN 'free'
            ELSE 'held' END
FROM net.lease WHERE resource = ANY(%(r)s)"""

# rows locked elsewhere are skipped, not waited for: this poller's own commit locks the leases it is fenced by
# for as long as it runs (and extends them as it ends, _EXTEND), and waiting for it would let every other lease
# it holds expire behind a long commit
_RENEW = """
UPDATE net.lease AS l SET renewed_at = now(), expires_at = now() + make_interval(secs => %(s)s)
FROM (SELECT resource FROM net.lease WHERE holder = %(h)s AND released_at IS NULL AND resource = ANY(%(r)s)
      ORDER BY resource FOR UPDATE SKIP LOCKED) AS mine
WHERE l.resource = mine.resource
RETURNING l.resource"""

# of the leases a renewal skipped, the ones not lost: still this holder's, or released by it (a release commits
# before the held set forgets it); read without waiting for their locks
_STILL_MINE = """
SELECT resource FROM net.lease WHERE holder = %(h)s AND resource = ANY(%(r)s)"""

# the end of a fenced commit: its leases run a whole lease length from the moment it commits (the clock, not the
# transaction's start), so a long commit never ends holding an expired lease
_EXTEND = """
UPDATE net.lease SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + make_interval(secs => %(s)s)
WHERE resource = ANY(%(r)s) AND holder = %(h)s AND released_at IS NULL"""

_RELEASE = """
UPDATE net.lease SET released_at = now(), expires_at = now()
WHERE resource = ANY(%(r)s) AND holder = %(h)s AND released_at IS NULL"""

# a failed cycle gives its work back at once (expired, not released: not done, the next taker counts a takeover)
_ABANDON = """
UPDATE net.lease SET expires_at = now()
WHERE resource = ANY(%(r)s) AND holder = %(h)s AND released_at IS NULL"""

_FENCE = "SELECT resource, holder FROM net.lease WHERE resource = ANY(%s) ORDER BY resource FOR UPDATE"

# the one net.cursor read outside Store: a fetch thread reads it on this connection right after taking the lease
# (Store's connection belongs to the committing thread)
_ESCROW_CURSORS = "SELECT source, cursor FROM net.cursor WHERE source = ANY(%s) AND cursor IS NOT NULL"


class LeaseLost(RuntimeError):
    """This poller no longer holds a lease it is about to commit under (it paused past the lease and another poller
    took the work over). The transaction is rolled back; the cycle ends."""


@dataclass(frozen=True)
class Take:
    outcome: str                  # 'taken', 'held' (another holder's live lease) or 'done' (released this cycle)
    taken_from: str | None = None  # a takeover: the holder whose lease had expired
    holder: str | None = None      # for 'held' / 'done': who holds or held it


def new_holder() -> str:
    """hostname:pid:random — unique per cycle (each cycle is a new holder), and the pid names the process."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Leases:
    """The leases of one poller run. ``start()`` fixes the cycle's start (database clock) and starts the heartbeat;
    ``close()`` releases or abandons what is still held and stops it."""

    def __init__(self, url: str, *, seconds: float = DEFAULT_LEASE_SECONDS, holder: str | None = None,
                 stall_seconds: float | None = None) -> None:
        if not seconds > 0:
            raise ValueError(f"lease seconds must be greater than 0, got {seconds!r}")
        self.url, self.seconds = url, float(seconds)
        self.stall_seconds = (max(STALL_MIN_SECONDS, STALL_LEASES * self.seconds) if stall_seconds is None
                              else stall_seconds)
        self._progress = time.monotonic()
        self.holder = holder or new_holder()
        self.since: datetime | None = None
        self.held: set[str] = set()
        self.takeovers: list[tuple[str, str]] = []  # (resource, previous holder)
        self._lock = threading.Lock()  # fetch threads take leases on the one connection
        # ``held`` alone, taken inside ``_lock`` or alone: the heartbeat reads it without waiting for ``_lock``, which
        # a take holds while it waits for another poller's commit to unlock the row
        self._held = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> "Leases":
        self._conn = self._connect()
        self.since = self._conn.execute("SELECT now()").fetchone()[0]
        self._heartbeat = threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True)
        self._heartbeat.start()
        return self

    def _connect(self) -> psycopg.Connection:
        # bounded: a server that cannot be reached fails the statement (or the release at close) instead of hanging
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        # taken and released per escrow, a few hundred commits a cycle: none waits for the WAL flush. A server
        # crash can lose only the last commits, in order (indexer.db.durability); the cycle's end flushes them all
        # (Store.finish_cycle)
        commit_without_flush_wait(conn)
        return conn

    def _execute(self, query: str, params) -> psycopg.Cursor:
        """``query`` on the lease connection (the caller holds ``_lock``). A connection the database dropped (a
        restart, an idle-session timeout, a proxy in between) is opened again once and the statement run again:
        each statement here is one autocommit statement that comes out the same when run twice (a take by the
        same holder, a read, a release), so a drop never costs the cycle. A second failure is raised."""
        try:
            return self._conn.execute(query, params)
        except psycopg.OperationalError as exc:
            if not self._conn.broken:
                raise
            log.warning("lease connection lost (%s): opening it again", str(exc).splitlines()[0] if str(exc) else
                        type(exc).__name__)
            self._conn.close()
            self._conn = self._connect()
            return self._conn.execute(query, params)

    def close(self, *, failed: bool = False) -> None:
        """Release what is held (a cycle that ended normally), or abandon it (a failed cycle: others take over
        without waiting for the expiry). A database that cannot be reached leaves the leases to expire."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        try:
            if self._conn is not None and self.held:
                with self._lock:
                    self._execute(_ABANDON if failed else _RELEASE, {"r": sorted(self.held), "h": self.holder})
                    with self._held:
                        self.held.clear()
        except psycopg.OperationalError as exc:
            log.warning("leases of %s not given back (%s): they expire", self.holder, exc)
        finally:
            if self._conn is not None:
                self._conn.close()

    def touch(self) -> None:
        """The poller made progress (called from the HTTP hooks and every lease statement); cheap, any thread."""
        self._progress = time.monotonic()

    def wait(self, seconds: float) -> None:
        """Pause between looks at leases other pollers hold (returns early once closing)."""
        self._stop.wait(seconds)

    @property
    def tick(self) -> float:
        """How often to look again at a lease another poller holds: a fraction of the lease, at most a second."""
        return min(1.0, self.seconds / 8)

    # -- taking and giving back ------------------------------------------------------------------
    def take(self, resource: str) -> Take:
        self.touch()
        with self._lock:
            row = self._execute(_TAKE, {"r": resource, "h": self.holder, "s": self.seconds,
                                        "since": self.since}).fetchone()
            if row is not None:
                with self._held:
                    again = resource in self.held  # held already: its takeover, if any, was counted then
                    self.held.add(resource)
                if row[0] is not None and not again:
                    self.takeovers.append((resource, row[0]))
                    log.warning("lease %s taken over from %s (expired)", resource, row[0])
                return Take("taken", taken_from=row[0])
            status = self._execute(_STATUS, {"r": [resource], "since": self.since}).fetchone()
        if status is None or status[2] == "free":  # freed between the two statements: look again later
            return Take("held", holder=status[1] if status else None)
        return Take(status[2], holder=status[1])

    def status(self, resources: Iterable[str]) -> dict[str, str]:
        """resource → 'done', 'free' or 'held' (see :data:`_STATUS`)."""
        self.touch()
        with self._lock:
            rows = self._execute(_STATUS, {"r": sorted(resources), "since": self.since}).fetchall()
        return {resource: state for resource, _, state in rows}

    def release(self, resources: Iterable[str]) -> None:
        self.touch()
        with self._lock:
            mine = sorted(set(resources) & self.held)
            if mine:
                self._execute(_RELEASE, {"r": mine, "h": self.holder})
                with self._held:
                    self.held.difference_update(mine)

    def escrow_cursors(self, escrow_id: str) -> tuple[int, bool]:
        """The escrow's committed cursor and whether it is final, read after taking its lease (the cycle's own
        listing may be older than another poller's commits)."""
        with self._lock:
            rows = dict(self._execute(_ESCROW_CURSORS, ([f"escrow:{escrow_id}", f"escrow-final:{escrow_id}"],))
                        .fetchall())
        return int(rows.get(f"escrow:{escrow_id}") or 0), f"escrow-final:{escrow_id}" in rows

    # -- fencing ---------------------------------------------------------------------------------
    def fence(self, conn: psycopg.Connection, resources: Iterable[str]) -> None:
        """Inside the caller's transaction on ``conn``: lock the leases and check this holder still holds them;
        raise :class:`LeaseLost` (the caller's transaction rolls back) when not."""
        self.touch()
        wanted = sorted(set(resources))
        rows = dict(conn.execute(_FENCE, (wanted,)).fetchall())
        for resource in wanted:
            if rows.get(resource) != self.holder:
                raise LeaseLost(f"lease {resource} lost to {rows.get(resource) or 'nobody'} (this poller, "
                                f"{self.holder}, paused past its {self.seconds:g} s lease?): its commit is rolled back")

    def extend(self, conn: psycopg.Connection, resources: Iterable[str]) -> None:
        """At the end of a fenced transaction on ``conn`` (its rows are locked since :meth:`fence`): run these
        leases a whole lease length from now, since the heartbeat skips them while the transaction holds them."""
        conn.execute(_EXTEND, {"r": sorted(set(resources)), "h": self.holder, "s": self.seconds})

    # -- heartbeat -------------------------------------------------------------------------------
    def renew(self, conn: psycopg.Connection) -> set[str]:
        """Extend every lease this poller holds by ``seconds`` from now (database clock), on ``conn`` (the
        heartbeat's own connection, so a renewal never waits behind a fetch thread); return the ones lost to
        another holder (the commits' fences stop their writes)."""
        with self._held:
            held = sorted(self.held)
        if not held:
            return set()
        renewed = {r for (r,) in conn.execute(_RENEW, {"s": self.seconds, "h": self.holder, "r": held}).fetchall()}
        if skipped := sorted(set(held) - renewed):  # locked by a commit (ours, or a taker's): lost only if not ours
            renewed |= {r for (r,) in conn.execute(_STILL_MINE, {"h": self.holder, "r": skipped}).fetchall()}
        with self._held:
            lost = (set(held) & self.held) - renewed  # released meanwhile are not lost
        if lost:
            log.warning("leases lost (taken over after expiry): %s", ", ".join(sorted(lost)))
        return lost

    def _beat(self) -> None:
        conn = None
        stalled = False
        while not self._stop.wait(self.seconds / 3):
            idle = time.monotonic() - self._progress
            if idle > self.stall_seconds:  # wedged: let the leases expire so another poller takes the work over
                if not stalled:
                    log.warning("no progress for %.0f s: leases of %s left to expire", idle, self.holder)
                stalled = True
                continue
            stalled = False
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(self.url, autocommit=True)
                self.renew(conn)
            except psycopg.Error as exc:  # the commits' fences decide; the next beat tries again
                log.warning("lease renewal failed: %s", exc)
        if conn is not None:
            conn.close()

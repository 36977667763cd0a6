"""Settling epochs for good: each epoch's partitions get one ``VACUUM (FREEZE, ANALYZE)`` once the poller is done
with them.

The archive only grows, and a settled epoch's rows never change again, but they keep the transaction ids that wrote
them. Once the database is autovacuum_freeze_max_age transactions older (200M by default; a poller commits hundreds
of transactions a cycle), autovacuum must freeze every such page, in every epoch not yet frozen, in one
anti-wraparound pass that cannot be cancelled: on a years-long archive, a rewrite of all of history at a moment
nobody chose. Frozen once, right after its epoch settles (its pages are still recent in the cache), a partition is
marked all-frozen in the visibility map, and every later pass skips it.

The same pass gives the partition statistics at the server's own target. A load analyses what it wrote with a
small sample (indexer.db.quickstats: enough for the replay and the rules, which plan one epoch at a time), and that
ANALYZE resets the count autovacuum waits on, so a partition that stops growing would keep the small sample's
statistics for good (autovacuum's ANALYZE is off for rec epoch partitions: migration 0020). History
is what analysts query, over many epochs and by any column: its statistics are refined here, once.

An epoch is settled when ``net.epoch_state`` says ``final`` (every escrow final, or pruned) or when it is more than
the chain's pruning window (:data:`~indexer.poller.finality.PRUNING_WINDOW`) behind the newest epoch the indexer has
seen (epochs loaded from files, which no poller tracks). Each frozen partition is recorded in
``net.frozen_partition`` by oid and name, so it is frozen once; a partition dropped by ``indexer archive`` and made
again by ``indexer ingest`` is a new relation, frozen again. Rows written to a frozen partition later (an amendment
loaded from a file) are ordinary rows again and autovacuum keeps them, as before.

The VACUUMs run with autovacuum's own throttle (``vacuum_cost_delay``) on a connection of their own, as a job of
``indexer run`` beside the poll cycle, so a large epoch is frozen gradually instead of taking a core and the disk
from the cycle. A partition another session holds (autovacuum working on it, a concurrent freeze by another poller)
is skipped, not waited for, and a partition dropped meanwhile is skipped too: both are tried again by the next run.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import psycopg

from indexer.db.quickstats import LOCK_NOT_AVAILABLE, maintenance_session
from indexer.load.partitions import EPOCH_PARTITIONS
from indexer.poller.finality import PRUNING_WINDOW

log = logging.getLogger(__name__)

FREEZE_INTERVAL = 600.0      # seconds between runs of the job in `indexer run`
VACUUM_COST_DELAY_MS = 2     # autovacuum's default throttle (autovacuum_vacuum_cost_delay)

# The epoch partitions of settled epochs that are not recorded as frozen under their current name. "The newest
# epoch" is the one part.ensure_ahead makes partitions after (rec.escrow, net.epoch_state).
_SETTLED_UNFROZEN = f"""
WITH newest AS (
  SELECT max(x) AS epoch FROM (SELECT max(epoch_index) FROM rec.escrow
                               UNION ALL SELECT max(epoch_index) FROM net.epoch_state) s(x)
), partitions AS ({EPOCH_PARTITIONS})
SELECT p.relid, p.relname, p.epoch_index
FROM partitions p, newest
WHERE (p.epoch_index < newest.epoch - %(window)s
       OR p.epoch_index IN (SELECT epoch_index FROM net.epoch_state WHERE state = 'final'))
  AND NOT EXISTS (SELECT 1 FROM net.frozen_partition f WHERE f.relid = p.relid AND f.relname = p.relname)
ORDER BY p.epoch_index, p.relname
"""

_RECORD = """
INSERT INTO net.frozen_partition (relid, relname, epoch_index) VALUES (%s, %s, %s)
ON CONFLICT (relid) DO UPDATE SET relname = excluded.relname, epoch_index = excluded.epoch_index, frozen_at = now()
"""

# markers of relations that no longer exist (dropped by `indexer archive`): their oids may be given out again
_FORGET_DROPPED = "DELETE FROM net.frozen_partition f WHERE NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = f.relid)"


@dataclass
class FreezeSummary:
    frozen: list[str] = field(default_factory=list)    # partitions frozen and recorded by this run
    skipped: list[str] = field(default_factory=list)   # held by another session, or gone: tried again next run
    seconds: float = 0.0


def freeze_settled(conn: psycopg.Connection, *, window: int = PRUNING_WINDOW,
                   cost_delay_ms: int = VACUUM_COST_DELAY_MS) -> FreezeSummary:
    """VACUUM (FREEZE, ANALYZE) every partition of a settled epoch not frozen yet, oldest epoch first, and record
    each. ``conn`` must be in autocommit mode (VACUUM runs outside a transaction). Cheap when there is nothing to do:
    a catalog query and the session's settings set and put back."""
    if not conn.autocommit:
        raise ValueError("freeze_settled needs an autocommit connection (VACUUM cannot run in a transaction)")
    start = time.perf_counter()
    out = FreezeSummary()
    conn.execute(_FORGET_DROPPED)
    todo = conn.execute(_SETTLED_UNFROZEN, {"window": window}).fetchall()
    # a skipped relation is only a WARNING: lock not available (55P03), or not the owner (a message that names
    # the relation, in any server language)
    with maintenance_session(conn, vacuum_cost_delay=str(cost_delay_ms)) as notices:
        for relid, relname, epoch in todo:
            name = f'part."{relname}"'
            notices.clear()
            try:
                conn.execute(f"VACUUM (FREEZE, ANALYZE, SKIP_LOCKED) {name}")
            except psycopg.errors.UndefinedTable:  # dropped since the list was read (a concurrent archive)
                out.skipped.append(name)
                continue
            if any(state == LOCK_NOT_AVAILABLE or relname in text for state, text in notices):
                out.skipped.append(name)
                continue
            conn.execute(_RECORD, (relid, relname, epoch))
            out.frozen.append(name)
    out.seconds = time.perf_counter() - start
    return out


def freeze_job(url: str | Callable[[], str]):
    """The `indexer run` job: one :func:`freeze_settled` on a connection of its own. A failure (the database
    unreachable, a statement error) is logged and the next run tries again; the poll cycle is never affected.
    ``url`` may be a callable, asked on every run (the embedded server may have moved)."""
    current = url if callable(url) else (lambda: url)

    def job() -> None:
        try:
            with psycopg.connect(current(), autocommit=True) as conn:
                summary = freeze_settled(conn)
        except psycopg.Error as exc:
            log.warning("freezing settled epochs failed (tried again in %.0f s): %s", FREEZE_INTERVAL,
                        str(exc).split("\n", 1)[0])
            return
        if summary.frozen or summary.skipped:
            log.info("froze %d partition(s) of settled epochs in %.1f s (%d skipped, tried again next run)",
                     len(summary.frozen), summary.seconds, len(summary.skipped))

    return job, FREEZE_INTERVAL, "freeze"

"""ANALYZE right after a bulk load, with a small sample, without waiting for autovacuum.

The stages that run right after a load (replay, rules) need the new row counts and the rough shape of the key
columns (how many escrows, how many rows each) to pick index scans; they do not need fine histograms. ANALYZE's
cost is in its sample (300 rows per unit of statistics target: 30,000 rows by default, sorted per column), so a
target of 10 gives the same row counts and distinct-value estimates good enough for those plans at about a
seventh of the cost (measured after a 294k-line load: 0.27 s -> 0.035 s for the four tx tables). That ANALYZE
resets the modification count autovacuum's own ANALYZE waits for, so a partition that stops growing keeps these
statistics until its epoch settles (for rec epoch partitions autovacuum's ANALYZE is off altogether, migration
0020): `indexer run` then analyses it at the server's target, once
(indexer.poller.freezing).

Autovacuum visits a database every ``autovacuum_naptime`` / (number of databases) and vacuums every partition a
load has grown past its insert threshold, often while the load still writes to it. A plain ANALYZE of a partition
autovacuum is vacuuming waits for that VACUUM to end (or for ``deadlock_timeout``, when the server cancels it):
measured at the end of a 978k-line load, 0.24 and 0.46 s for the first epoch's confirm and finish partitions
(7-27 ms each with autovacuum off), on the load's critical path. So the load's ANALYZE skips a locked table
(``SKIP_LOCKED``) and hands it on (:class:`Deferred`); :func:`analyze_deferred`, right before the rules plan,
analyses those that autovacuum has not analysed since (its VACUUM of a never-analysed table is followed by its
ANALYZE), by when the VACUUM has usually ended.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from psycopg import pq

BULK_STATISTICS_TARGET = 10
LOCK_NOT_AVAILABLE = "55P03"  # the SQLSTATE of ANALYZE/VACUUM (SKIP_LOCKED)'s "skipping ... lock not available"


@contextmanager
def maintenance_session(conn: psycopg.Connection, **settings: str) -> Iterator[list[tuple[str | None, str]]]:
    """For a block of maintenance commands (ANALYZE, VACUUM) on ``conn``: the session's ``settings`` (name=value)
    and ``client_min_messages = warning``, restored after; yields the list that every notice the server sends
    meanwhile is appended to, as (SQLSTATE, primary message). A relation such a command skips (SKIP_LOCKED, not
    the owner) is only a WARNING, which a session that silences warnings would never see. The fields are copied
    in the handler: the notice they come from is freed when it returns."""
    names = [*settings, "client_min_messages"]
    values = [*settings.values(), "warning"]
    previous = conn.execute("SELECT " + ", ".join(["current_setting(%s)"] * len(names)), names).fetchone()

    def apply(wanted) -> None:
        conn.execute("SELECT " + ", ".join(["set_config(%s, %s, false)"] * len(names)),
                     [x for pair in zip(names, wanted) for x in pair])

    notices: list[tuple[str | None, str]] = []
    handler = lambda diag: notices.append((diag.sqlstate, diag.message_primary or ""))  # noqa: E731
    apply(values)
    conn.add_notice_handler(handler)
    try:
        yield notices
    finally:
        conn.remove_notice_handler(handler)
        # a failed transaction puts them back itself when it is rolled back (and takes no statement before)
        if not conn.broken and conn.info.transaction_status != pq.TransactionStatus.INERROR:
            apply(previous)


@dataclass
class Deferred:
    """Tables whose ANALYZE was skipped because another session (autovacuum, as a rule) held them; ``since``: the
    server's clock at the first skip (an autovacuum ANALYZE after it counts)."""
    tables: list[str] = field(default_factory=list)
    since: datetime | None = None

    def add(self, other: "Deferred | None") -> None:
        if other is None or not other.tables:
            return
        self.tables += [t for t in other.tables if t not in self.tables]
        self.since = other.since if self.since is None else min(self.since, other.since or self.since)


def analyze_quickly(conn: psycopg.Connection, tables: Iterable[str], *, wait: bool = False) -> Deferred:
    """ANALYZE each table (a trusted, qualified name) with the small sample; the session's setting is restored.
    Unless ``wait``, a table another session holds is skipped and returned in the :class:`Deferred`."""
    tables, deferred = list(tables), Deferred()
    if not tables:
        return deferred
    with maintenance_session(conn, default_statistics_target=str(BULK_STATISTICS_TARGET)) as notices:
        for table in tables:
            notices.clear()
            conn.execute(f"ANALYZE {table}" if wait else f"ANALYZE (SKIP_LOCKED) {table}")
            if any(state == LOCK_NOT_AVAILABLE for state, _ in notices):
                deferred.tables.append(table)
    if deferred.tables:
        deferred.since = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    return deferred


def analyze_deferred(conn: psycopg.Connection, deferred: Deferred | None) -> list[str]:
    """ANALYZE (waiting, this time) the deferred tables that still exist and that autovacuum has not analysed
    since they were skipped; returns their names."""
    if deferred is None or not deferred.tables:
        return []
    stale = [r[0] for r in conn.execute(
        """SELECT t FROM unnest(%s::text[]) WITH ORDINALITY AS d(t, n)
           WHERE to_regclass(t) IS NOT NULL
             AND coalesce(pg_stat_get_last_autoanalyze_time(to_regclass(t)), '-infinity') < %s
           ORDER BY n""", (deferred.tables, deferred.since))]
    analyze_quickly(conn, stale, wait=True)
    if not conn.autocommit:
        conn.commit()
    return stale

"""Is this indexer healthy? The one definition behind `indexer status` (its exit code) and `GET /ready`.

/ready (``ready``): the database answers and no source of ``api.ingest_status`` lags more than the readiness limit
(``--ready-max-lag``, default 900 s). `indexer status` is healthy when it is ready and, besides, the schema exists,
the last poll cycle did not fail (the ``chain`` source carries a failed cycle's error until a cycle succeeds), and
no unsilenced alert at or above a severity (default ``warning``) is firing. Everything is read from the ``api``
views, so the read-only role can run it; a handful of queries on one connection.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from indexer.db.schema import current_stamp, expected_stamp

# the readiness rule: sources whose lag is over the limit (finished sources have no lag: api.ingest_status)
LAGGING = """SELECT source, lag_seconds FROM api.ingest_status WHERE lag_seconds > %s
             ORDER BY lag_seconds DESC, source LIMIT 20"""

_SOURCES = """SELECT source_kind, count(*), count(*) FILTER (WHERE last_error IS NOT NULL),
                     count(*) FILTER (WHERE lag_seconds > %(max)s), max(lag_seconds)
              FROM api.ingest_status GROUP BY 1 ORDER BY 1"""
# the sources worth a line of their own: the chain, epochs not final yet, and any lagging or erroring source
_SHOWN = """SELECT source, cursor, lag_seconds, last_error, last_success_at FROM api.ingest_status
            WHERE source_kind = 'chain' OR (source_kind = 'epoch' AND cursor IS DISTINCT FROM 'final')
               OR last_error IS NOT NULL OR lag_seconds > %(max)s
            ORDER BY source_kind = 'chain' DESC, last_error IS NULL, lag_seconds DESC NULLS LAST, source
            LIMIT %(limit)s"""
_CYCLE = """SELECT cursor, last_success_at, last_error, last_error_at, now() FROM api.ingest_status
            WHERE source = 'chain'"""
_EPOCHS = """SELECT coalesce(state, 'ingested'), count(*), min(epoch_index), max(epoch_index) FROM api.epochs
             GROUP BY 1 ORDER BY min(epoch_index)"""
_FIRING = """SELECT rule, severity, count(*) FILTER (WHERE NOT silenced), count(*) FILTER (WHERE silenced)
             FROM api.alerts WHERE status = 'firing' GROUP BY 1, 2 ORDER BY 1, 2"""
# escrows per evidence level, weakest first (every level, 0 when none), and how many of them failed a check
# (counted first, then joined to the levels: on Citus a distributed table may not sit inside an outer join's null side)
_LEVELS = """SELECT l.level, COALESCE(c.escrows, 0), COALESCE(c.failed, 0)
             FROM unnest(fn.evidence_levels()) WITH ORDINALITY AS l(level, n)
             LEFT JOIN (SELECT level, count(*) AS escrows, count(failed_check) AS failed
                        FROM api.escrow_verification GROUP BY level) c ON c.level = l.level
             ORDER BY l.n"""
# 0/0 Finishes stored without their payload: asked again each cycle, or given up (indexer.poller.awaited)
_PAYLOADS = """SELECT count(*) FILTER (WHERE state = 'awaited'), count(*) FILTER (WHERE state = 'given_up')
               FROM api.awaited_payloads"""
_HAS_PAYLOADS = "SELECT to_regclass('api.awaited_payloads') IS NOT NULL"
_HAS_LEVELS = """SELECT to_regprocedure('fn.evidence_levels()') IS NOT NULL
                        AND to_regclass('api.escrow_verification') IS NOT NULL"""

SEVERITIES = ("info", "warning", "critical")
SHOWN_SOURCES = 20


def lagging(conn: psycopg.Connection, max_lag: float) -> list[tuple[str, float]]:
    """Sources lagging more than ``max_lag`` seconds (at most 20, worst first): a non-empty list is not ready."""
    return conn.execute(LAGGING, (max_lag,)).fetchall()


def counts(severity: str, fail_on: str | None) -> bool:
    """Does a firing alert of ``severity`` make the indexer unhealthy? ``fail_on`` None: no alert does.
    (alert.state allows only the three SEVERITIES.)"""
    return fail_on is not None and SEVERITIES.index(severity) >= SEVERITIES.index(fail_on)


@dataclass
class Health:
    max_lag: float
    fail_on: str | None
    schema: str = "ok"                                   # ok, missing, differs (from this code's)
    lagging: list[tuple[str, float]] = field(default_factory=list)
    sources: list[tuple] = field(default_factory=list)   # (class, count, erroring, lagging, max lag)
    shown: list[tuple] = field(default_factory=list)     # (source, cursor, lag, last error, last success)
    cycle: tuple | None = None                           # (epoch, last success, error, error at, now)
    epochs: list[tuple] = field(default_factory=list)    # (state, count, first, last)
    alerts: list[tuple] = field(default_factory=list)    # (rule, severity, firing, silenced)
    levels: list[tuple] = field(default_factory=list)    # (evidence level, escrows, failed a check); [] on a schema
                                                         # without verification
    payloads: tuple[int, int] | None = None               # (awaited, given up); None on a schema without them
    reasons: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.reasons

    @property
    def cycle_failed(self) -> bool:
        return self.cycle is not None and self.cycle[2] is not None


def check(conn: psycopg.Connection, max_lag: float, fail_on: str | None = "warning") -> Health:
    """Everything `indexer status` shows, with the reasons (if any) it is not healthy."""
    h = Health(max_lag=max_lag, fail_on=fail_on)
    if conn.execute("SELECT to_regclass('api.ingest_status')").fetchone()[0] is None:
        h.schema = "missing"
        h.reasons.append("the schema is not created: run `indexer migrate`")
        return h
    if current_stamp(conn) != expected_stamp():
        h.schema = "differs"  # the views may still answer; any writing command migrates first
    params = {"max": max_lag, "limit": SHOWN_SOURCES}
    h.lagging = lagging(conn, max_lag)
    h.sources = conn.execute(_SOURCES, params).fetchall()
    h.shown = conn.execute(_SHOWN, params).fetchall()
    h.cycle = conn.execute(_CYCLE).fetchone()
    h.epochs = conn.execute(_EPOCHS).fetchall()
    h.alerts = conn.execute(_FIRING).fetchall()
    if conn.execute(_HAS_LEVELS).fetchone()[0]:  # an older schema still answers the rest
        h.levels = conn.execute(_LEVELS).fetchall()
    if conn.execute(_HAS_PAYLOADS).fetchone()[0]:
        h.payloads = tuple(conn.execute(_PAYLOADS).fetchone())
    if h.lagging:
        total = max(len(h.lagging), sum(n for _, _, _, n, _ in h.sources))
        h.reasons.append(f"{total} source(s) lag more than {max_lag:g} s: "
                         + ", ".join(f"{s} ({ago(lag)})" for s, lag in h.lagging[:5]) + (", …" if total > 5 else ""))
    if h.cycle_failed:
        _, _, error, at, now = h.cycle
        h.reasons.append(f"the last poll cycle failed {ago((now - at).total_seconds())} ago: {error}")
    firing = [(rule, severity, n) for rule, severity, n, _ in h.alerts if n and counts(severity, fail_on)]
    if firing:
        h.reasons.append(f"{sum(n for *_, n in firing)} alert(s) firing at {fail_on} or above: "
                         + ", ".join(f"{rule} ({severity}) x{n}" for rule, severity, n in firing))
    return h


def ago(seconds: float | None) -> str:
    """A duration for people: 45s, 12m, 3.1h, 2.0d."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit == "m" else 1):
            return f"{seconds / size:.1f}{unit}" if unit != "m" else f"{seconds // size:.0f}m"
    return f"{seconds:.0f}s"


def iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None

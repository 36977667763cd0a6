"""Prometheus metrics (the official client library), interface.md §1.

Most values are read from the database, so every `indexer run` process sharing one database reports the same picture
and a restart loses nothing: lag and errors per source class, rows ingested per kind, disputable penalties per rule,
escrows per evidence level (every level, 0 when none), 0/0 Finishes whose payload is awaited or given up (both
states, 0 when none), firing alerts per rule (0 for every known rule that is not firing), readiness. The cycle
duration histogram is this process's own.

Scrapes and readiness probes share one :class:`DatabaseReader`: one database connection (application_name
``indexer-metrics``), one refresh at a time, and a result younger than ``max_age`` seconds is served as it is, so
any number of concurrent scrapes costs one connection and at most one query round at a time.
Source labels are the source's class (``chain``, ``epoch``, ``escrow``, ``escrow-final``, ``http``), not each
escrow, so the number of series stays small; ``api.ingest_status`` has the per-source detail.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from indexer.alerts.rules import load_rules
from indexer.db.url import first_line, remember
from indexer.observe import health
from indexer.records import KINDS

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 3  # seconds: a scrape or readiness probe must answer even when the database does not
APPLICATION_NAME = "indexer-metrics"
MAX_AGE = 5.0  # seconds a refresh is served to later scrapes and probes
WAIT = 8.0     # seconds a caller waits for a refresh in progress before taking the last result (Prometheus: 10 s)

# rec.<table> → record kind (interface.md §2), from the one definition of the kinds
_KIND_OF_TABLE = {kind.table: kind.name for kind in KINDS.values()}

_LAG = """SELECT source_kind, max(lag_seconds) FROM api.ingest_status
          WHERE lag_seconds IS NOT NULL GROUP BY 1"""
# the rows kept and those the poller's retention deleted (net.failure_pruned): a counter that never goes down
_ERRORS = """SELECT source_kind, sum(n)::bigint FROM (
               SELECT source_kind, count(*) AS n FROM net.failure GROUP BY 1
               UNION ALL SELECT source_kind, failures FROM net.failure_pruned) f GROUP BY 1"""
# every writer's inserts, per record table: a partitioned table's rows are its partitions' (part.*), counted under
# the table they belong to (the partitioned table itself never counts any)
_ROWS = """SELECT root.relname, sum(s.n_tup_ins)::bigint FROM pg_stat_user_tables s
           JOIN pg_class root ON root.oid = coalesce(pg_partition_root(s.relid), s.relid)
           WHERE root.relnamespace = 'rec'::regnamespace GROUP BY root.relname"""
_DISPUTABLE = "SELECT rule, count(*) FROM api.disputable_penalties GROUP BY 1"
# every level of fn.evidence_levels (0 when no escrow is at it); an escrow not verified yet counts as none
_LEVELS = """SELECT l.level, COALESCE(c.escrows, 0) FROM unnest(fn.evidence_levels()) AS l(level)
             LEFT JOIN (SELECT level, count(*) AS escrows FROM api.escrow_verification GROUP BY level) c
                    ON c.level = l.level"""
# 0/0 Finishes without their response payload, per state (both states, 0 when none; indexer.poller.awaited)
_PAYLOADS = """SELECT s.state, count(p.state) FROM unnest(ARRAY['awaited', 'given_up']) AS s(state)
               LEFT JOIN api.awaited_payloads p ON p.state = s.state GROUP BY 1 ORDER BY 1"""
_FIRING = """SELECT rule, count(*) FILTER (WHERE status = 'firing')
             FROM (SELECT rule, status FROM alert.state UNION ALL SELECT unnest(%s::text[]), NULL) AS known
             GROUP BY 1"""


@dataclass(frozen=True)
class Snapshot:
    """One refresh: readiness (the /ready body) and the rows of each database metric."""
    at: float  # time.monotonic() when the refresh started
    up: bool
    ready: bool
    body: dict
    rows: dict[str, list] = field(default_factory=dict)


class DatabaseReader:
    """The database side of /metrics and /ready: one connection, one refresh at a time, recent results shared.

    A caller gets the last result if it is younger than ``max_age``; otherwise it waits for the refresh lock and
    gets a result that started after it arrived (a refresh that finished while it waited counts, so a burst of
    scrapes costs at most two refreshes). A failure is logged as one line and drops the connection; the next
    refresh connects again."""

    def __init__(self, url: str, max_lag: float, rules: Sequence[str] = (), max_age: float = MAX_AGE) -> None:
        self.url, self.max_lag, self.rules, self.max_age = remember(url), max_lag, list(rules), max_age
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._last: Snapshot | None = None

    def current(self) -> Snapshot:
        arrived = time.monotonic()
        last = self._last
        if last is not None and arrived - last.at <= self.max_age:
            return last
        if not self._lock.acquire(timeout=WAIT):
            log.warning("metrics: a database refresh has taken over %g s; serving the last result", WAIT)
            return self._last or Snapshot(arrived, False, False, {"ready": False, "max_lag_seconds": self.max_lag,
                                                                  "database": "no answer yet"})
        try:
            last = self._last
            if last is not None and last.at >= min(arrived, time.monotonic() - self.max_age):
                return last  # refreshed while this caller waited, or still fresh
            self._last = self._refresh()
            return self._last
        finally:
            self._lock.release()

    def readiness(self) -> tuple[bool, dict]:
        """Ready when the database answers and no source lags more than ``max_lag`` seconds; the body says why
        not."""
        snap = self.current()
        return snap.ready, snap.body

    def close(self) -> None:
        with self._lock:
            self._drop()

    def retarget(self, url: str) -> None:
        """Read `url` from the next refresh on (the embedded server came back on another port)."""
        with self._lock:
            self.url, self._last = remember(url), None
            self._drop()

    def _refresh(self) -> Snapshot:
        started = time.monotonic()
        body: dict = {"ready": False, "max_lag_seconds": self.max_lag}
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT, autocommit=True,
                                             application_name=APPLICATION_NAME,
                                             options=f"-c statement_timeout={CONNECT_TIMEOUT * 1000}")
            conn = self._conn
            lagging = health.lagging(conn, self.max_lag)  # the readiness rule `indexer status` shares
            rows = {"lag": conn.execute(_LAG).fetchall(), "errors": conn.execute(_ERRORS).fetchall(),
                    "rows": conn.execute(_ROWS).fetchall(), "disputable": conn.execute(_DISPUTABLE).fetchall(),
                    "levels": conn.execute(_LEVELS).fetchall(), "payloads": conn.execute(_PAYLOADS).fetchall(),
                    "firing": conn.execute(_FIRING, (self.rules,)).fetchall()}
        except psycopg.Error as exc:
            self._drop()
            reason = first_line(exc)  # libpq may quote the URL, password and all
            log.warning("metrics: database unreachable: %s", reason)
            body["database"] = "unreachable: " + reason
            return Snapshot(started, False, False, body)
        body["database"] = "ok"
        body["lagging"] = [{"source": s, "lag_seconds": round(lag, 1)} for s, lag in lagging]
        body["ready"] = not lagging
        return Snapshot(started, True, body["ready"], body, rows)

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None


class DatabaseCollector:
    """The database metrics of the reader's current snapshot."""

    def __init__(self, reader: DatabaseReader) -> None:
        self.reader = reader

    def collect(self):
        snap = self.reader.current()
        up = GaugeMetricFamily("indexer_database_up", "1 when the database answered this scrape")
        ready = GaugeMetricFamily("indexer_ready", "1 when /ready answers 200 (database up, no source over the lag)")
        up.add_metric([], 1 if snap.up else 0)
        ready.add_metric([], 1 if snap.ready else 0)
        yield from (up, ready)
        if snap.up:
            yield from self._families(snap.rows)

    @staticmethod
    def _families(rows: dict):
        def family(cls, name: str, doc: str, label: str, pairs):
            metric = cls(name, doc, labels=[label])
            for value_label, value in pairs:
                metric.add_metric([value_label], value)
            return metric

        yield family(GaugeMetricFamily, "indexer_source_lag_seconds", "seconds since the last success of the most "
                     "lagging source of each class (finished sources excluded)", "source", rows["lag"])
        yield family(CounterMetricFamily, "indexer_source_errors", "fetch failures recorded per source class",
                     "source", rows["errors"])
        yield family(CounterMetricFamily, "indexer_rows_ingested", "rows inserted per record kind (PostgreSQL's "
                     "table statistics: every process writing this database)", "kind",
                     ((_KIND_OF_TABLE[t], n) for t, n in rows["rows"] if t in _KIND_OF_TABLE))
        yield family(GaugeMetricFamily, "indexer_disputable_penalties", "disputable penalties stored, per rule "
                     "family", "rule", rows["disputable"])
        yield family(GaugeMetricFamily, "indexer_escrows_by_evidence_level", "escrows per verification level of "
                     "their log (none, signed, replayed, settled; api.escrow_verification)", "level", rows["levels"])
        yield family(GaugeMetricFamily, "indexer_missing_payloads", "0/0 Finishes stored without their response "
                     "payload: awaited (asked again each cycle) or given_up (api.awaited_payloads)", "state",
                     rows["payloads"])
        yield family(GaugeMetricFamily, "indexer_alerts_firing", "alerts firing per alert rule (every known rule, "
                     "0 when none fires)", "rule", rows["firing"])


class Metrics:
    """One registry per process (tests run several): the database collector and this process's cycle metrics."""

    def __init__(self, url: str, max_lag: float, rules: Sequence[str] | None = None,
                 max_age: float = MAX_AGE) -> None:
        if rules is None:
            rules = [r.name for r in load_rules()]
        self.reader = DatabaseReader(url, max_lag, rules, max_age)
        self.registry = CollectorRegistry()
        self.registry.register(DatabaseCollector(self.reader))
        self.cycle_seconds = Histogram("indexer_cycle_seconds", "duration of one poll cycle",
                                       buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600), registry=self.registry)
        self.cycles = Counter("indexer_cycles", "poll cycles run by this process, by outcome", ["outcome"],
                              registry=self.registry)
        self.last_cycle = Gauge("indexer_last_cycle_timestamp_seconds", "end of this process's last poll cycle",
                                registry=self.registry)

    def observe_cycle(self, seconds: float, outcome: str = "ok") -> None:
        self.cycle_seconds.observe(seconds)
        self.cycles.labels(outcome).inc()
        self.last_cycle.set(time.time())

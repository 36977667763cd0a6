"""Prometheus metrics (the official client library), interface.md §1.

Most values are read from the database at scrape time, so every `indexer run` process sharing one database reports
the same picture and a restart loses nothing: lag and errors per source class, rows ingested per kind, disputable
penalties per rule, firing alerts per rule, readiness. The cycle duration histogram is this process's own.
Source labels are the source's class (``chain``, ``epoch``, ``escrow``, ``escrow-final``, ``http``), not each
escrow, so the number of series stays small; ``api.ingest_status`` has the per-source detail.
"""
from __future__ import annotations

import logging
import time

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from indexer.records import KINDS

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 3  # seconds: a scrape or readiness probe must answer even when the database does not

# rec.<table> → record kind (interface.md §2), from the one definition of the kinds
_KIND_OF_TABLE = {kind.table: kind.name for kind in KINDS.values()}

_LAG = """SELECT source_kind, max(lag_seconds) FROM api.ingest_status
          WHERE lag_seconds IS NOT NULL GROUP BY 1"""
_ERRORS = "SELECT source_kind, count(*) FROM net.failure GROUP BY 1"
# every writer's inserts, per record table: a partitioned table's rows are its partitions' (part.*), counted under
# the table they belong to (the partitioned table itself never counts any)
_ROWS = """SELECT root.relname, sum(s.n_tup_ins)::bigint FROM pg_stat_user_tables s
           JOIN pg_class root ON root.oid = coalesce(pg_partition_root(s.relid), s.relid)
           WHERE root.relnamespace = 'rec'::regnamespace GROUP BY root.relname"""
_DISPUTABLE = "SELECT rule, count(*) FROM api.disputable_penalties GROUP BY 1"
_FIRING = """SELECT rule, count(*) FILTER (WHERE status = 'firing') FROM alert.state GROUP BY 1"""
_LAGGING = """SELECT source, lag_seconds FROM api.ingest_status WHERE lag_seconds > %s
              ORDER BY lag_seconds DESC, source LIMIT 20"""


def readiness(url: str, max_lag: float) -> tuple[bool, dict]:
    """Ready when the database answers and no source lags more than ``max_lag`` seconds; the body says why not."""
    body: dict = {"ready": False, "max_lag_seconds": max_lag}
    try:
        with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, autocommit=True) as conn:
            lagging = conn.execute(_LAGGING, (max_lag,)).fetchall()
    except psycopg.Error as exc:
        body["database"] = "unreachable: " + (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return False, body
    body["database"] = "ok"
    body["lagging"] = [{"source": s, "lag_seconds": round(lag, 1)} for s, lag in lagging]
    body["ready"] = not lagging
    return body["ready"], body


class DatabaseCollector:
    """Reads the database on every scrape (one short connection)."""

    def __init__(self, url: str, max_lag: float) -> None:
        self.url, self.max_lag = url, max_lag

    def collect(self):
        up = GaugeMetricFamily("indexer_database_up", "1 when the database answered this scrape")
        ready = GaugeMetricFamily("indexer_ready", "1 when /ready answers 200 (database up, no source over the lag)")
        ok, _ = readiness(self.url, self.max_lag)
        ready.add_metric([], 1 if ok else 0)
        try:
            with psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT, autocommit=True) as conn:
                families = list(self._families(conn))
        except psycopg.Error as exc:
            log.warning("metrics: database unreachable: %s", type(exc).__name__)
            up.add_metric([], 0)
            yield from (up, ready)
            return
        up.add_metric([], 1)
        yield from (up, ready, *families)

    def _families(self, conn: psycopg.Connection):
        def family(cls, name: str, doc: str, label: str, rows):
            metric = cls(name, doc, labels=[label])
            for value_label, value in rows:
                metric.add_metric([value_label], value)
            return metric

        yield family(GaugeMetricFamily, "indexer_source_lag_seconds", "seconds since the last success of the most "
                     "lagging source of each class (finished sources excluded)", "source", conn.execute(_LAG))
        yield family(CounterMetricFamily, "indexer_source_errors", "fetch failures recorded per source class",
                     "source", conn.execute(_ERRORS))
        yield family(CounterMetricFamily, "indexer_rows_ingested", "rows inserted per record kind (PostgreSQL's "
                     "table statistics: every process writing this database)", "kind",
                     ((_KIND_OF_TABLE[t], n) for t, n in conn.execute(_ROWS) if t in _KIND_OF_TABLE))
        yield family(GaugeMetricFamily, "indexer_disputable_penalties", "disputable penalties stored, per rule "
                     "family", "rule", conn.execute(_DISPUTABLE))
        yield family(GaugeMetricFamily, "indexer_alerts_firing", "alerts firing per alert rule", "rule",
                     conn.execute(_FIRING))


class Metrics:
    """One registry per process (tests run several): the database collector and this process's cycle metrics."""

    def __init__(self, url: str, max_lag: float) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(DatabaseCollector(url, max_lag))
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

"""What a load did (IngestSummary), the rec.source registry it commits its resume cursor to, and the statistics it
refreshes after it (analyze_grown): shared by the NDJSON ingest and the poller's commits."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import psycopg

from indexer.db.quickstats import Deferred, analyze_quickly
from indexer.load.partitions import ROUTED, analyze_written
from indexer.records import KINDS
from indexer.sources.ndjson import InputFile

ANALYZE_AFTER_ROWS = 10_000


@dataclass
class IngestSummary:
    files: int = 0
    lines: int = 0
    skipped_resumed: int = 0
    loaded: int = 0
    amended: int = 0
    unchanged: int = 0
    quarantined: int = 0
    poller_state: int = 0  # rows of the poller's state an export carries (indexer.load.pollstate)
    kept_newer: int = 0  # a restore's archived records not applied: the stored ones were written after the archive
    by_kind: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    epochs: set = field(default_factory=set)  # the epoch partitions escrow-keyed rows went to (what to ANALYZE)
    deferred_analyze: Deferred = field(default_factory=Deferred)  # skipped while autovacuum held them (quickstats)

    def add(self, other: "IngestSummary") -> None:
        for name in ("lines", "skipped_resumed", "loaded", "amended", "unchanged", "quarantined", "kept_newer",
                     "poller_state"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.by_kind.update(other.by_kind)
        self.epochs |= other.epochs


@dataclass(frozen=True)
class SourceKey:
    """What names a source in rec.source (an :class:`InputFile` has both too): the digest of its bytes, which
    identifies it for provenance and resume, and where it was read from."""
    uri: str
    digest: str


def register_source(conn: psycopg.Connection, inp: InputFile | SourceKey) -> tuple[int, int]:
    """Return (source_id, resume_after_line). A completed file is processed again from the start (idempotent)."""
    row = conn.execute(
        """INSERT INTO rec.source (digest, uri) VALUES (%s, %s)
           ON CONFLICT (digest) DO UPDATE SET last_loaded_at = now(), uri = excluded.uri
           RETURNING source_id, lines_committed, completed_at""", (inp.digest, inp.uri)).fetchone()
    conn.commit()
    source_id, committed, completed_at = row
    return source_id, (0 if completed_at is not None else committed)


def analyze_grown(conn: psycopg.Connection, summary: IngestSummary) -> Deferred:
    """Refresh planner statistics after a load instead of waiting for autovacuum (the replay and the rules run
    right after it, and their index choices depend on row counts): each small table the load wrote at least
    ANALYZE_AFTER_ROWS rows of, and each epoch partition it wrote that autovacuum's rule says is due
    (indexer.load.partitions.analyze_written: autovacuum leaves those to the loader). Never the whole history:
    ANALYZE of a partitioned parent samples every partition again, which on an archive of many epochs costs more
    each time and tells the replay and the rules (which plan one epoch at a time) nothing they need. Returns the
    tables skipped because autovacuum held them (indexer.db.quickstats.analyze_deferred's work)."""
    grown = [kind for kind, n in summary.by_kind.items() if n >= ANALYZE_AFTER_ROWS and kind not in ROUTED]
    deferred = analyze_quickly(conn, [f"rec.{KINDS[kind].table}" for kind in grown])
    written = sorted(kind for kind, n in summary.by_kind.items() if n > 0 and kind in ROUTED)
    deferred.add(analyze_written(conn, [f"rec.{KINDS[kind].table}" for kind in written], summary.epochs))
    if not conn.autocommit:
        conn.commit()
    return deferred

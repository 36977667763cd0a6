"""Database side of the poller: records through the NDJSON loader, cursors in the same transaction, archive.

Each fetch becomes a ``rec.source`` (digest = sha256 of its NDJSON lines, uri = the URL); its records are typed by
:meth:`BatchLoader.prepare` and written by :meth:`CursorBatchLoader.commit`, which wraps the loader's transaction so
that the cursor updates, the archived raw responses and the failures commit together with the rows.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Iterable, Mapping

import psycopg

from indexer.load.ingest import BatchLoader, IngestSummary, register_source
from indexer.wire.normalize import dumps_record

_UPSERT_CURSOR = """
INSERT INTO net.cursor (source, cursor, last_success_at, last_error, last_error_at, next_retry_at, updated_at)
VALUES (%s, %s, now(), NULL, NULL, NULL, now())
ON CONFLICT (source) DO UPDATE SET cursor = excluded.cursor, last_success_at = now(), last_error = NULL,
    last_error_at = NULL, next_retry_at = NULL, updated_at = now()"""

_CURSOR_ERROR = """
INSERT INTO net.cursor (source, last_error, last_error_at, next_retry_at, updated_at)
VALUES (%s, %s, now(), now() + make_interval(secs => %s), now())
ON CONFLICT (source) DO UPDATE SET last_error = excluded.last_error, last_error_at = now(),
    next_retry_at = excluded.next_retry_at, updated_at = now()"""


class CursorBatchLoader(BatchLoader):
    """BatchLoader whose commit also runs ``after`` (cursor updates, archive) inside the same transaction."""

    def commit_with(self, prepared, after) -> IngestSummary:
        with self.conn.transaction():
            out = self.commit(prepared) if prepared is not None else IngestSummary()
            after(self.conn)
        return out


@dataclass
class LoadResult:
    loaded: int = 0
    amended: int = 0
    unchanged: int = 0
    quarantined: int = 0
    records: int = 0


class Store:
    def __init__(self, conn: psycopg.Connection, *, archive: bool = True) -> None:
        self.conn = conn
        self.archive = archive
        self.responses: list[tuple[str, int, int | None, bytes]] = []
        self.failures: list[tuple[str, str, str, bool]] = []
        self._loader: CursorBatchLoader | None = None
        self.total = LoadResult()

    # -- hooks for the HTTP layer ---------------------------------------------------------------
    def on_response(self, url: str, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        if self.archive:
            h = headers.get("X-Cosmos-Block-Height") or headers.get("x-cosmos-block-height")
            self.responses.append((url, status, int(h) if h and h.isdigit() else None, body))

    def on_failure(self, url: str, error: str, transient: bool, source: str = "http") -> None:
        self.failures.append((source, url, error, transient))

    # -- cursors --------------------------------------------------------------------------------
    def cursor(self, source: str) -> str | None:
        row = self.conn.execute("SELECT cursor FROM net.cursor WHERE source = %s", (source,)).fetchone()
        return row[0] if row else None

    def cursors(self, prefix: str) -> dict[str, str]:
        rows = self.conn.execute("SELECT source, cursor FROM net.cursor WHERE source LIKE %s AND cursor IS NOT NULL",
                                 (prefix.replace("_", r"\_") + "%",)).fetchall()
        return dict(rows)

    def error(self, source: str, message: str, retry_seconds: float = 60.0) -> None:
        with self.conn.transaction():
            self.conn.execute(_CURSOR_ERROR, (source, message[:2000], retry_seconds))
            self._flush(self.conn)

    # -- loading --------------------------------------------------------------------------------
    def load(self, records: Iterable[Mapping[str, Any]], uri: str, cursors: Mapping[str, str] | None = None) -> LoadResult:
        """Load records (one fetch = one source) and set ``cursors`` in one transaction."""
        lines = [dumps_record(r).encode() for r in records]
        prepared = None
        loader = self._loader
        if lines:
            digest = hashlib.sha256(b"\n".join(lines)).hexdigest()
            source_id, _ = register_source(self.conn, SimpleNamespace(digest=digest, uri=uri))
            if loader is None:
                loader = self._loader = CursorBatchLoader(self.conn, source_id)
            loader.source_id = source_id
            prepared = loader.prepare(list(enumerate(lines, start=1)))
        elif loader is None:
            loader = self._loader = CursorBatchLoader(self.conn, 0)

        def after(conn: psycopg.Connection) -> None:
            for source, value in (cursors or {}).items():
                conn.execute(_UPSERT_CURSOR, (source, value))
            if prepared is not None:
                conn.execute("UPDATE rec.source SET completed_at = now() WHERE source_id = %s", (loader.source_id,))
            self._flush(conn)

        s = loader.commit_with(prepared, after)
        out = LoadResult(s.loaded, s.amended, s.unchanged, s.quarantined, len(lines))
        for name in ("loaded", "amended", "unchanged", "quarantined", "records"):
            setattr(self.total, name, getattr(self.total, name) + getattr(out, name))
        return out

    def flush(self) -> None:
        with self.conn.transaction():
            self._flush(self.conn)

    def _flush(self, conn: psycopg.Connection) -> None:
        if self.responses:
            with conn.cursor().copy("COPY net.raw_response (url, status, height, body) FROM STDIN") as cp:
                for row in self.responses:
                    cp.write_row(row)
            self.responses = []
        if self.failures:
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO net.failure (source, url, error, transient) VALUES (%s,%s,%s,%s)",
                                [(s, u, e[:2000], t) for s, u, e, t in self.failures])
            self.failures = []

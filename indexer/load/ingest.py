"""NDJSON ingest: lines -> COPY into staging -> one set-based upsert per kind per batch.

Each batch commits its records, its quarantined lines and the file's resume cursor in one transaction, so a
kill -9 at any point followed by a rerun ends with exactly the rows of a clean run.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg

from indexer.load.kinds import LOAD_ORDER
from indexer.load.statements import upsert_statement
from indexer.sources.ndjson import Accepted, InputFile, classify_line, open_input

BATCH_LINES = 50_000
STAGE_DDL = """
CREATE TEMP TABLE IF NOT EXISTS stage (line bigint, kind text, doc jsonb) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_text (line bigint, kind text, raw text) ON COMMIT DELETE ROWS;
"""


@dataclass
class IngestSummary:
    files: int = 0
    lines: int = 0
    skipped_resumed: int = 0
    loaded: int = 0
    amended: int = 0
    unchanged: int = 0
    quarantined: int = 0
    by_kind: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def add(self, other: "IngestSummary") -> None:
        for name in ("lines", "skipped_resumed", "loaded", "amended", "unchanged", "quarantined"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.by_kind.update(other.by_kind)


def _escape_copy(raw: bytes) -> bytes:
    return raw.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\r", b"\\r")


def _printable(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")


def register_source(conn: psycopg.Connection, inp: InputFile) -> tuple[int, int]:
    """Return (source_id, resume_after_line). A completed file is processed again from the start (idempotent)."""
    row = conn.execute(
        """INSERT INTO rec.source (digest, uri) VALUES (%s, %s)
           ON CONFLICT (digest) DO UPDATE SET last_loaded_at = now(), uri = excluded.uri
           RETURNING source_id, lines_committed, completed_at""", (inp.digest, inp.uri)).fetchone()
    conn.commit()
    source_id, committed, completed_at = row
    return source_id, (0 if completed_at is not None else committed)


class BatchLoader:
    def __init__(self, conn: psycopg.Connection, source_id: int):
        self.conn, self.source_id = conn, source_id
        conn.execute(STAGE_DDL)
        conn.commit()

    def load(self, batch: list[tuple[int, bytes]]) -> IngestSummary:
        out = IngestSummary(lines=len(batch))
        rejects, rows, kinds = [], bytearray(), set()
        for number, raw in batch:
            verdict = classify_line(raw)
            if isinstance(verdict, Accepted):
                kinds.add(verdict.kind)
                rows += b"%d\t%s\t%s\n" % (number, verdict.kind.encode(), _escape_copy(raw))
            else:
                rejects.append((self.source_id, number, verdict.kind, verdict.reason, _printable(raw)))
        with self.conn.transaction():
            self._stage(rows)
            for kind in (k for k in LOAD_ORDER if k in kinds):
                self._upsert(kind, out)
            rejects += self._fallback_rejects
            if rejects:
                with self.conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO rec.quarantine (source_id, line, kind, reason, raw) VALUES (%s,%s,%s,%s,%s) "
                        "ON CONFLICT (source_id, line) DO NOTHING", rejects)
                out.quarantined += len(rejects)
            self.conn.execute("UPDATE rec.source SET lines_committed = %s WHERE source_id = %s",
                              (batch[-1][0], self.source_id))
        return out

    def _stage(self, rows: bytearray) -> None:
        """COPY into jsonb staging; if PostgreSQL's JSON parser refuses a line orjson accepted, stage as text and
        sort the lines out one by one so only the offending ones are quarantined."""
        self._fallback_rejects = []
        try:
            with self.conn.transaction():
                with self.conn.cursor().copy("COPY pg_temp.stage (line, kind, doc) FROM STDIN") as cp:
                    cp.write(rows)
            return
        except psycopg.DataError:
            pass
        with self.conn.cursor().copy("COPY pg_temp.stage_text (line, kind, raw) FROM STDIN") as cp:
            cp.write(rows)
        self.conn.execute("INSERT INTO pg_temp.stage SELECT line, kind, rec.try_jsonb(raw) FROM pg_temp.stage_text")
        bad = self.conn.execute("SELECT t.line, t.kind, t.raw FROM pg_temp.stage s JOIN pg_temp.stage_text t "
                                "USING (line) WHERE s.doc IS NULL").fetchall()
        self.conn.execute("DELETE FROM pg_temp.stage WHERE doc IS NULL")
        self._fallback_rejects = [(self.source_id, line, kind, "PostgreSQL rejects this JSON (invalid escape or "
                                   "character)", raw) for line, kind, raw in bad]

    def _upsert(self, kind: str, out: IngestSummary) -> None:
        row = self.conn.execute(upsert_statement(kind), {"source_id": self.source_id}).fetchone()
        inserted, amended, quarantined, superseded, valid = row
        out.loaded += inserted
        out.amended += amended + superseded
        out.quarantined += quarantined
        out.unchanged += valid - inserted - amended - superseded
        out.by_kind[kind] += valid


def ingest_file(conn: psycopg.Connection, inp: InputFile, *, batch_lines: int = BATCH_LINES,
                on_progress=None) -> IngestSummary:
    source_id, resume_after = register_source(conn, inp)
    loader = BatchLoader(conn, source_id)
    total = IngestSummary(files=1)
    lines = inp.open_lines(on_progress)
    if resume_after:  # lines up to the committed cursor are already in the database
        lines = _skip_through(lines, resume_after, total)
    for batch in _batched(lines, batch_lines):
        total.add(loader.load(batch))
    conn.execute("UPDATE rec.source SET completed_at = now() WHERE source_id = %s", (source_id,))
    conn.commit()
    return total


def ingest_paths(url: str, names: list[str], *, batch_lines: int = BATCH_LINES, progress=None) -> IngestSummary:
    start = time.perf_counter()
    summary = IngestSummary()
    with psycopg.connect(url) as conn:
        for name in names:
            inp = open_input(name)
            try:
                task = progress.add_task(inp.uri, total=inp.size) if progress else None
                hook = (lambda pos, t=task: progress.update(t, completed=pos)) if progress else None
                summary.add(ingest_file(conn, inp, batch_lines=batch_lines, on_progress=hook))
                summary.files += 1
            finally:
                inp.cleanup()
    summary.seconds = time.perf_counter() - start
    return summary


def _skip_through(lines, last_committed: int, summary: IngestSummary):
    for number, raw in lines:
        if number <= last_committed:
            summary.skipped_resumed += 1
            continue
        yield number, raw


def _batched(it, n):
    batch = []
    for item in it:
        batch.append(item)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch

"""NDJSON ingest: lines -> COPY into staging -> one set-based upsert per kind per batch.

Each batch commits its records, its quarantined lines and the file's resume cursor in one transaction, so a
kill -9 at any point followed by a rerun ends with exactly the rows of a clean run.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import psycopg

from indexer.load.coerce import COERCE, Invalid
from indexer.load.kinds import KINDS, LOAD_ORDER, PG_TYPES
from indexer.load.slots import SlotCheck
from indexer.load.statements import stage_ddl, stage_table, upsert_statement
from indexer.rules import refusals
from indexer.sources.ndjson import Accepted, InputFile, classify_line, open_input

BATCH_LINES = 50_000
ANALYZE_AFTER_ROWS = 50_000


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


@dataclass
class Prepared:
    lines: int
    last_line: int
    rows: dict
    rejects: list
    parses: list = field(default_factory=list)  # vLLM parses of 0/0 Finish payloads (rules.refusal_parse)


class BatchLoader:
    def __init__(self, conn: psycopg.Connection, source_id: int):
        self.conn, self.source_id = conn, source_id
        self.slots = SlotCheck()
        for kind in KINDS.values():
            conn.execute(stage_ddl(kind))
        conn.commit()

    def load(self, batch: list[tuple[int, bytes]]) -> IngestSummary:
        return self.commit(self.prepare(batch))

    def prepare(self, batch: list[tuple[int, bytes]]) -> "Prepared":
        """CPU part (no database): classify and type every line."""
        rejects, rows, parses = [], defaultdict(list), []
        for number, raw in batch:
            verdict = classify_line(raw)
            if isinstance(verdict, Accepted):
                try:
                    row = (number, *COERCE[verdict.kind](verdict.obj))
                    rows[verdict.kind].append(row)
                    if verdict.kind == "finish" and row[_F_IN] == 0 and row[_F_OUT] == 0 and row[_F_PAYLOAD]:
                        parses.append(refusals.parse_row(row[1], row[2], row[_F_PAYLOAD]))
                except Invalid as exc:
                    rejects.append((self.source_id, number, verdict.kind, str(exc), _printable(raw)))
            else:
                rejects.append((self.source_id, number, verdict.kind, verdict.reason, _printable(raw)))
        return Prepared(len(batch), batch[-1][0], rows, rejects, parses)

    def commit(self, prepared: "Prepared") -> IngestSummary:
        """Database part: records, quarantine and the resume cursor in one transaction."""
        out = IngestSummary(lines=prepared.lines)
        rows, rejects = prepared.rows, prepared.rejects
        with self.conn.transaction():
            self.slots.check(self.conn, rows, rejects, self.source_id)
            for kind in (k for k in LOAD_ORDER if rows.get(k)):
                if self._insert_new(kind, rows[kind]):
                    out.loaded += len(rows[kind])
                    out.by_kind[kind] += len(rows[kind])
                else:
                    self._copy(kind, rows[kind])
                    self._upsert(kind, out)
            refusals.store(self.conn, prepared.parses)
            if rejects:
                with self.conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO rec.quarantine (source_id, line, kind, reason, raw) VALUES (%s,%s,%s,%s,%s) "
                        "ON CONFLICT (source_id, line) DO NOTHING", rejects)
                out.quarantined += len(rejects)
            self.conn.execute("UPDATE rec.source SET lines_committed = %s WHERE source_id = %s",
                              (prepared.last_line, self.source_id))
        return out

    def _insert_new(self, kind: str, rows: list[tuple]) -> bool:
        """Fast path for records whose keys are all new (a first load, a resumed file, the poller's new diffs):
        COPY straight into the table. A key that exists raises a unique violation, the savepoint rolls back, and
        the caller takes the staging path, which records amendments."""
        spec, key_at = KINDS[kind], _KEY_AT[kind]
        keys = {tuple(row[i] for i in key_at) for row in rows}
        if len(keys) != len(rows):  # the same key twice in one batch: the staging path picks the last line
            return False
        try:
            with self.conn.transaction(), self.conn.cursor().copy(
                    f"COPY rec.{spec.table} ({', '.join(spec.columns)}, extra, source_id, source_line) FROM STDIN"
            ) as cp:
                cp.set_types(_DIRECT_TYPES[kind])
                sid = self.source_id
                for row in rows:
                    cp.write_row((*row[1:], sid, row[0]))
        except psycopg.errors.UniqueViolation:
            return False
        scope_at = _SCOPE_AT[kind]
        dirty = ("replay.dirty_escrow (escrow_id) SELECT unnest(%s::text[])" if spec.scope == "escrow"
                 else "rules.dirty_epoch (epoch_index) SELECT unnest(%s::bigint[])")
        self.conn.execute(f"INSERT INTO {dirty} ON CONFLICT DO NOTHING", (sorted({r[scope_at] for r in rows}),))
        return True

    def _copy(self, kind: str, rows: list[tuple]) -> None:
        spec = KINDS[kind]
        with self.conn.cursor().copy(f"COPY {stage_table(spec)} FROM STDIN") as cp:
            cp.set_types(_COPY_TYPES[kind])
            for row in rows:
                cp.write_row(row)

    def _upsert(self, kind: str, out: IngestSummary) -> None:
        row = self.conn.execute(upsert_statement(kind), {"source_id": self.source_id}).fetchone()
        inserted, amended, superseded, valid = row
        out.loaded += inserted
        out.amended += amended + superseded
        out.unchanged += valid - inserted - amended - superseded
        out.by_kind[kind] += valid


# Positions in a staged finish row (line number first) that decide whether its payload is parsed at load time.
_F_IN, _F_OUT, _F_PAYLOAD = (1 + KINDS["finish"].columns.index(c)
                             for c in ("input_tokens", "output_tokens", "response_payload"))

# Row positions (line number first) of each kind's key and dirty-scope column.
_KEY_AT = {name: [1 + kind.columns.index(k) for k in kind.key] for name, kind in KINDS.items()}
_SCOPE_AT = {name: 1 + kind.columns.index("escrow_id" if kind.scope == "escrow" else "epoch_index")
             for name, kind in KINDS.items()}

# COPY formats Python values by these types; jsonb columns arrive as ready JSON text.
_COPY_TYPES = {name: ["bigint", *[("text" if PG_TYPES[f.type] == "jsonb" else PG_TYPES[f.type].split("(")[0])
                                  for f in kind.fields], "text"]
               for name, kind in KINDS.items()}
_DIRECT_TYPES = {name: [*types[1:], "bigint", "bigint"] for name, types in _COPY_TYPES.items()}


def ingest_file(conn: psycopg.Connection, inp: InputFile, *, batch_lines: int = BATCH_LINES,
                on_progress=None) -> IngestSummary:
    source_id, resume_after = register_source(conn, inp)
    loader = BatchLoader(conn, source_id)
    total = IngestSummary(files=1)
    lines = inp.open_lines(on_progress)
    if resume_after:  # lines up to the committed cursor are already in the database
        lines = _skip_through(lines, resume_after, total)
    _pipelined(loader, _batched(lines, batch_lines), total)
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
        _analyze_if_grown(conn, summary)
    summary.seconds = time.perf_counter() - start
    return summary


def _analyze_if_grown(conn: psycopg.Connection, summary: IngestSummary) -> None:
    """Refresh planner statistics after a bulk load instead of waiting for autovacuum: the replay and the rules
    run right after it, and their index choices depend on row counts."""
    for kind, n in summary.by_kind.items():
        if n >= ANALYZE_AFTER_ROWS:
            conn.execute(f"ANALYZE rec.{KINDS[kind].table}")
    conn.commit()


def _pipelined(loader: BatchLoader, batches, total: IngestSummary) -> None:
    """Type batch N+1 in this thread while a worker commits batch N (psycopg releases the GIL while it waits
    for the server). Commits stay strictly in order, so the resume cursor never passes an uncommitted line."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-db") as db:
        pending = None
        for batch in batches:
            prepared = loader.prepare(batch)
            if pending is not None:
                total.add(pending.result())
            pending = db.submit(loader.commit, prepared)
        if pending is not None:
            total.add(pending.result())


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

"""NDJSON ingest: lines -> typed COPY text (worker processes) -> the tables, in file order.

A kind's rows whose keys are known new (an escrow this load registered: indexer.load.fresh; else an index probe:
indexer.load.probe) are COPYed straight into their table; other rows go through a temporary stage, then one plain
INSERT when none of their keys exists, else one set-based upsert per kind (amendments with history). Each batch
commits its records, its quarantined lines and the file's resume cursor in one transaction, so a kill -9 at any
point followed by a rerun ends with exactly the rows of a clean run.
"""
from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from contextlib import closing, nullcontext
from collections.abc import Callable, Iterable
from functools import partial

import psycopg

from indexer import workers
from indexer.db.deadlocks import retrying_deadlocks
from indexer.db.durability import commit_without_flush_wait
from indexer.records import KINDS, LOAD_ORDER
from indexer.load.behind import AnalyzeBehind
from indexer.load.errors import IngestFailed, IngestInterrupted
from indexer.load.fresh import KnownNew
from indexer.load.marks import BatchMarks
from indexer.load.partitions import ROUTED, EpochRouter, routed_column
from indexer.load import pollstate, resolved, signed_conflicts
from indexer.load.prepare import Prepared
from indexer.load.probe import keys_may_exist
from indexer.load.slots import SlotCheck
from indexer.load.summary import IngestSummary, analyze_grown, register_source
from indexer.load.statements import conflict_check, insert_staged, stage_ddl, stage_table, upsert_statement
from indexer.load.typing_pool import InlineTyping, TypingPool, TypingWorkerLost
from indexer import refusals
from indexer.sources.ndjson import InputError, InputFile, block_lines, check_input, open_input, read_ahead

log = logging.getLogger(__name__)

BATCH_LINES = 50_000
KEY_RACE_ATTEMPTS = 5  # loads of one batch that meet a key written concurrently before the load fails
PREPARE_WORKERS = 2


SourceLines = Callable[[], Iterable[tuple[int, bytes]]]  # a batch's (line number, raw line) pairs, read again


class BatchLoader:
    """Commits prepared batches of one source: records, quarantine and the resume cursor in one transaction."""

    def __init__(self, conn: psycopg.Connection, source_id: int):
        self.conn, self.source_id = conn, source_id
        self.committed_line = 0  # the resume cursor this loader last committed
        # source -> the line after which its next batch starts (its last committed batch's, or the resume cursor)
        self.floors: dict[int, int] = {}
        # a restore (an archive file read back): when the archive was written. A stored record written since then
        # is newer than the archived one, which is then not applied (statements.upsert_statement)
        self.archived_at: str | None = None
        self.slots = SlotCheck()
        self.router = EpochRouter()
        self.known = KnownNew()  # keys new without a probe (indexer.load.fresh)
        # direct writes in savepoints (see _insert_new): only while a batch that met a concurrent key is retried
        self.guarded = False
        self.behind: AnalyzeBehind | None = None  # told each committed batch's epochs (indexer.load.behind)
        self.staged: set[str] = set()  # the stage tables the open batch filled (emptied before it commits)
        self.made: set[str] = set()  # stage tables made by committed batches (each when a batch first needs it)

    def commit(self, prepared: Prepared, source_lines: SourceLines) -> IngestSummary:
        """The batch in one transaction; tried again if the server cancels it as a deadlock victim (a concurrent
        loader creating an epoch's partitions: indexer.db.deadlocks). ``source_lines()`` gives the batch's (line,
        raw) pairs again, from the committing process's copy (never sent back by the typing workers): a slot out of
        range is rare, and only then are the offending lines looked up."""
        what = f"batch ending at line {prepared.last_line}"
        try:
            for attempt in range(1, KEY_RACE_ATTEMPTS + 1):
                try:
                    out = retrying_deadlocks(self.conn, lambda: self._commit_once(prepared, source_lines), what)
                    break
                except _KeyRace:
                    if attempt == KEY_RACE_ATTEMPTS:
                        raise
                    # a concurrent writer inserted a key first: the batch again (that writer has committed by
                    # now), each direct write in a savepoint (_guard)
                    log.info("%s: a key was written concurrently; loading the batch again, key by key", what)
                    self.guarded = True
        finally:
            self.guarded = False
        if self.behind is not None:
            self.behind.batch(out.epochs)
        return out

    def forget(self) -> None:
        """After a caller's transaction around committed batches rolled back (indexer.poller.store): the partitions
        and registry rows they made are gone, so is what the loader knew of them."""
        self.router.forget()
        self.known.forget()
        self.made.clear()
        self.floors.clear()

    def _commit_once(self, prepared: Prepared, source_lines: SourceLines) -> IngestSummary:
        try:
            return self._write(prepared, source_lines)
        finally:
            self.staged.clear()  # emptied, or rolled back with the batch

    def _write(self, prepared: Prepared, source_lines: SourceLines) -> IngestSummary:
        out = IngestSummary(lines=prepared.lines)
        if "escrow" in prepared.kinds:  # partitions exist before their epoch's rows (docs/partitioning.md)
            named = EpochRouter.batch_epochs(prepared.kinds["escrow"].copy)
            self.router.ensure(self.conn, named)
            out.epochs |= named  # an escrow's txs loaded before it move into its epoch's partition
        with self.conn.transaction():
            bad, slot_rejects = self.slots.check(self.conn, prepared, self.source_id, source_lines)
            epochs = targets = probes = None
            signed_rejects: list[tuple] = []
            registered: set[str] = set()  # escrows this batch registered: none of their rows existed
            written = {}  # routed kind -> its KindBatch, for the marks of KnownNew once the batch committed
            marks = BatchMarks()  # what the batch dirtied, marked as its last writes (indexer.load.marks)
            for kind in (k for k in LOAD_ORDER if k in prepared.kinds):
                kb = prepared.kinds[kind]
                copy = _without_lines(kb.copy, bad[kind]) if kind in bad else kb.copy
                if not copy:
                    continue
                if kind in ROUTED:  # escrow-keyed rows carry their escrow's epoch: the partition key
                    if epochs is None:
                        epochs, locked_new = self.router.lock(self.conn, sorted(set().union(
                            *(prepared.kinds[k].scope for k in ROUTED if k in prepared.kinds))))
                        registered |= locked_new
                        targets = self.router.targets(self.conn, epochs)
                        probes = self.router.probe_tables(self.conn, epochs)
                    copy = self.router.route(copy, epochs, None if kind in bad else kb.escrow_spans)
                    out.epochs.update(epochs.values())
                    written[kind] = kb
                if self._insert_new(kind, copy, kb, targets[kind] if kind in ROUTED else f"rec.{KINDS[kind].table}",
                                    probes[kind] if kind in ROUTED and probes else None,
                                    self.known.to_probe(kind, kb, registered) if kind in ROUTED else None):
                    n = kb.count - len(bad.get(kind, ()))
                    out.loaded += n
                    out.by_kind[kind] += n
                    marks.add(kind, kb.scope)
                else:
                    if kind == "signed_diff":  # records of one diff that differ: kept by signature, not by order
                        signed_rejects = signed_conflicts.resolve(self.conn, self.source_id, source_lines)
                    self._upsert(kind, out, marks, not kb.distinct_keys)
                if kind == "escrow":
                    moved, fresh = self.router.sync(self.conn, sorted(kb.scope))
                    registered |= fresh
                    # records stored before their escrow came are checked against it now (indexer.load.slots)
                    if moved and (lost := self.slots.recheck_stored(self.conn, sorted(moved))):
                        marks.add("escrow", lost)
                        out.quarantined += len(lost)
                    # signed diffs chosen between before their creator was known are chosen again by signature
                    if changed := signed_conflicts.recheck_stored(self.conn, sorted(kb.scope)):
                        marks.add("signed_diff", changed)
                        out.quarantined += len(changed)
            refusals.store(self.conn, prepared.parses)
            # lines of the poller's state (an export's, indexer.load.pollstate) go to their tables, not quarantine
            typed_out = pollstate.take(self.conn, prepared.rejects) if prepared.rejects else []
            out.poller_state += len(prepared.rejects) - len(typed_out)
            if rejects := typed_out + slot_rejects + signed_rejects:
                with self.conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO rec.quarantine (source_id, line, kind, reason, raw) VALUES (%s,%s,%s,%s,%s) "
                        "ON CONFLICT (source_id, line) DO NOTHING", rejects)
                out.quarantined += len(rejects)
            # open quarantine rows this batch's valid lines supersede are marked resolved (indexer.load.resolved)
            resolved.resolve(self.conn, self.source_id, {k: (kb.copy, kb.scope) for k, kb in prepared.kinds.items()},
                             self.floors.get(self.source_id, 0), prepared.last_line)
            if self.staged:  # the stages hold nothing between batches (statements.stage_ddl: why by hand)
                self.conn.execute("TRUNCATE " + ", ".join(sorted(self.staged)))
            self.conn.execute("UPDATE rec.source SET lines_committed = %s WHERE source_id = %s",
                              (prepared.last_line, self.source_id))
            marks.write(self.conn)
        self.committed_line = self.floors[self.source_id] = prepared.last_line
        self.known.committed(registered, written)
        self.made |= self.staged  # (a batch rolled back takes the stages it made with it)
        return out

    def _insert_new(self, kind: str, copy: bytes, kb, table: str, probe_tables: dict | None = None,
                    to_probe: set | None = None) -> bool:
        """Fast path for records whose keys are all new (a first load, a resumed file, the poller's new diffs).
        Whether a key exists already (or twice in the batch) is found out first, never learnt from a unique
        violation (the server would log every such expected failure as an ERROR with the key's values):

        * the worker counted the batch's keys (``distinct_keys``);
        * none of the batch's keys can exist yet (indexer.load.probe: an index probe per escrow over the batch's
          key range, or per epoch; true on a first load of well-ordered records), asked only of the escrows in
          ``to_probe`` (None: all; indexer.load.fresh knows the others' keys are new): then the batch is COPYed
          straight into the table;
        * else the batch is staged and one join asks whether any key exists: if none, a plain INSERT from the stage.

        False: the batch is staged and the caller's upsert (which records amendments) takes it.
        A routed kind's rows end with their epoch_index (routed by the caller); ``table``
        is where they go (the parent, or the one partition they all belong to: EpochRouter.targets);
        ``probe_tables``, for a batch spanning epochs, the partitions to probe (EpochRouter.probe_tables)."""
        spec = KINDS[kind]
        stage = stage_table(spec)
        direct = kb.distinct_keys and not keys_may_exist(self.conn, kind, kb, table, probe_tables, to_probe)
        if direct:
            try:  # a concurrent ingest may still insert one of these keys first: that one is a real, rare violation
                with self._guard(), self.conn.cursor().copy(
                        f"COPY {table} (source_line, {', '.join(spec.columns)}, extra, source_id"
                        f"{routed_column(kind)}) FROM STDIN"
                ) as cp:
                    cp.write(copy)
            except psycopg.errors.UniqueViolation as exc:
                if not self.guarded:
                    raise _KeyRace from exc
                direct = False
        if not direct:
            if stage not in self.made:
                self.conn.execute(stage_ddl(spec))
            self.staged.add(stage)
            with self.conn.cursor().copy(f"COPY {stage} FROM STDIN") as cp:
                cp.write(copy)
            if not kb.distinct_keys or self.conn.execute(conflict_check(kind, table), prepare=True).fetchone()[0]:
                return False
            try:
                with self._guard():
                    self.conn.execute(insert_staged(kind, table), prepare=True)
            except psycopg.errors.UniqueViolation as exc:
                if not self.guarded:
                    raise _KeyRace from exc
                return False
        return True  # the caller marks the batch's scopes dirty

    def _guard(self):
        """A savepoint around a direct write only while a batch that met a concurrent key is retried: a savepoint
        costs two round trips and a subtransaction per write, for a violation the probes make rare. Unguarded, a
        violation rolls the batch back whole and commit() runs it again guarded (a bulk loader's retry, finer)."""
        return self.conn.transaction() if self.guarded else nullcontext()

    def _upsert(self, kind: str, out: IngestSummary, marks: BatchMarks, repeats_keys: bool) -> None:
        row = self.conn.execute(upsert_statement(kind, repeats_keys),
                                {"source_id": self.source_id, "archived_at": self.archived_at}).fetchone()
        # *_out: a tx kind's other txs of a key, quarantined (indexer.load.samekey); kept: a restore's archived
        # records older than the stored ones, not applied (quarantined with the reason)
        inserted, amended, superseded, valid, dirty, reverify, staged_out, stored_out, kept, raced = row
        if raced:  # keys a concurrent transaction committed while this statement waited: merged only by a retry
            raise _KeyRace(f"{raced} {kind} key(s) written by a concurrent load while this one waited")
        marks.add(kind, dirty, reverify)
        out.loaded += inserted
        out.amended += amended + superseded
        out.unchanged += valid - inserted - amended - superseded - staged_out - kept
        out.quarantined += staged_out + stored_out
        out.kept_newer += kept
        out.by_kind[kind] += valid - staged_out


class _KeyRace(Exception):
    """A direct write met a key that a concurrent writer inserted after the probe, or an upsert one it inserted and
    committed while the upsert waited (unseen by the statement, so not merged): the batch rolled back."""


def _without_lines(copy: bytes, lines: set[int]) -> bytes:
    """Drop the COPY rows of the given source lines (each row starts with its line number)."""
    keep = [row for row in copy.split(b"\n") if row and int(row.split(b"\t", 1)[0]) not in lines]
    return b"".join(row + b"\n" for row in keep)


def ingest_file(conn: psycopg.Connection, inp: InputFile, *, batch_lines: int = BATCH_LINES,
                on_progress=None, on_batch=None, behind: AnalyzeBehind | None = None,
                archived_at: str | None = None) -> IngestSummary:
    """Load one file. Its batches commit with ``synchronous_commit = off``: a commit returns before the server has
    flushed its WAL (a flush costs 1-28 ms a batch, on the connection the whole load waits for, and more while the
    replay follower commits too). Safe for a file: a batch's rows and its resume cursor are one
    transaction and the file is the durable copy, so a server crash can only lose the last batches whole, with
    their cursor, and the next run loads them again. The file's completion commits with the session's own setting
    (synchronous by default), which flushes every batch before it: a load the command reports is durable.
    ``archived_at``: the file is an archive written then (indexer.archive.verify_archived); a stored record written
    since is newer than its archived version, which is then not applied."""
    durable = commit_without_flush_wait(conn)
    source_id, resume_after = register_source(conn, inp)
    loader = BatchLoader(conn, source_id)
    loader.behind = behind
    loader.floors[source_id] = resume_after
    loader.archived_at = archived_at
    if inp.epochs:  # every partition the file's escrows need, in one call, before the replay follower holds parents
        loader.router.ensure(conn, set(inp.epochs))
        conn.commit()
    total = IngestSummary(files=1)
    try:
        # small first blocks, doubling up to batch_lines: the first commit waits for an eighth of a block's typing
        # closed here, whatever ends the load: a reader left to the garbage collector could be collected in a
        # forked child, or at interpreter exit when its thread can no longer run
        with closing(read_ahead(inp.open_blocks(batch_lines, on_progress, ramp_from=batch_lines // 8))) as blocks:
            _type_and_commit(loader, blocks, resume_after, total, on_batch)
        # this commit flushes the batches' too (when the setting is the default, on)
        conn.execute("SELECT set_config('synchronous_commit', %s, false)", (durable,))
        conn.execute("UPDATE rec.source SET completed_at = now() WHERE source_id = %s", (source_id,))
        conn.commit()
    except KeyboardInterrupt:
        raise IngestInterrupted(inp.uri, _stored_cursor(conn, source_id, max(loader.committed_line, resume_after))
                                ) from None
    except TypingWorkerLost as exc:
        raise IngestFailed(inp.uri, max(loader.committed_line, resume_after), exc,
                           f"a typing process died twice on lines {exc.first}-{exc.last}") from exc
    except _KeyRace as exc:  # the batch rolled back each time; what committed before it stays
        raise IngestFailed(inp.uri, max(loader.committed_line, resume_after), exc,
                           f"concurrent loads wrote the batch's keys first in {KEY_RACE_ATTEMPTS} attempt(s)") from exc
    except psycopg.errors.DiskFull as exc:  # the batch rolled back; what committed before it stays
        raise IngestFailed(inp.uri, max(loader.committed_line, resume_after), exc,
                           "the database server's disk is full") from exc
    except psycopg.OperationalError as exc:
        if not conn.broken:  # an error of a statement (a lock timeout, a deadlock), not of the connection
            raise
        # the cursor cannot be read back: the last commit the server confirmed
        raise IngestFailed(inp.uri, max(loader.committed_line, resume_after), exc) from exc
    return total


def _stored_cursor(conn: psycopg.Connection, source_id: int, known: int) -> int:
    """The resume cursor as stored: Ctrl-C may land after the server committed a batch but before we heard so."""
    try:
        conn.rollback()
        return conn.execute("SELECT lines_committed FROM rec.source WHERE source_id = %s", (source_id,)).fetchone()[0]
    except (psycopg.Error, KeyboardInterrupt):
        return known


def ingest_paths(url: str, names: list[str], *, batch_lines: int = BATCH_LINES, progress=None,
                 on_batch=None, archived: dict[str, str | None] | None = None) -> IngestSummary:
    """Load the files in order. Every file is checked before the first loads; a file that turns out bad while
    loading (a corrupt gzip stream) raises InputError with ``partial`` set to what the earlier files loaded: their
    batches (and this file's batches before the bad spot) are committed and dirty, so the caller still replays them.
    ``on_batch(lines, escrows)`` is called just before each batch commits, with the escrows it touches (the
    replay that follows the load keeps off them: indexer.replay.follow). ``archived``: name -> when the archive
    it is part of was written (a restore: ingest_file's ``archived_at``)."""
    for name in names:
        check_input(name)
    start = time.perf_counter()
    summary = IngestSummary()
    with psycopg.connect(url) as conn, AnalyzeBehind(url) as behind:
        try:
            for name in names:
                inp = open_input(name)
                try:
                    task = progress.add_task(inp.uri, total=inp.size) if progress else None
                    hook = (lambda pos, t=task: progress.update(t, completed=pos)) if progress else None
                    summary.add(ingest_file(conn, inp, batch_lines=batch_lines, on_progress=hook,
                                            on_batch=on_batch, behind=behind,
                                            archived_at=(archived or {}).get(name)))
                    summary.files += 1
                finally:
                    inp.cleanup()
        except InputError as exc:
            conn.rollback()
            summary.seconds = time.perf_counter() - start
            exc.partial = summary
            raise
        summary.deferred_analyze = behind.close()  # the epochs the load moved past, analysed beside it
        summary.deferred_analyze.add(analyze_grown(conn, summary))
    summary.seconds = time.perf_counter() - start
    return summary


def _type_and_commit(loader: BatchLoader, blocks, resume_after: int, total: IngestSummary, on_batch=None) -> None:
    """Worker processes type and render blocks (pure CPU, in parallel) while this thread commits them strictly
    in file order, so the resume cursor never passes an uncommitted line. At most a few blocks are in flight. An
    input of one block is typed here: nothing would overlap its typing (indexer.load.typing_pool.InlineTyping)."""
    blocks = iter(blocks)
    head = next(blocks, None)
    if head is None:  # nothing to load (an empty file, or wholly resumed past): no worker processes to start
        return
    second = next(blocks, None)  # read ahead anyway (read_ahead). The pool's processes are forked: they inherit
    # the compiled coercers, never touch `conn`. Ctrl-C is held to the points between a commit and the next submit:
    # the batch being committed completes, and the pool is never interrupted inside
    typing = (TypingPool(PREPARE_WORKERS, loader.source_id, resume_after) if second is not None
              else InlineTyping(loader.source_id, resume_after))
    with typing as pool, workers.InterruptAtSafePoints() as ctrl_c:
        in_flight: deque = deque()
        for first, block in itertools.chain([head], [second] if second is not None else [], blocks):
            ctrl_c.check()
            in_flight.append(pool.submit(first, block))
            if len(in_flight) > PREPARE_WORKERS:
                _commit_next(loader, pool, in_flight, resume_after, total, on_batch)
        while in_flight:
            ctrl_c.check()
            _commit_next(loader, pool, in_flight, resume_after, total, on_batch)


def _commit_next(loader: BatchLoader, pool: TypingPool | InlineTyping, in_flight: deque, resume_after: int,
                 total: IngestSummary, on_batch=None) -> None:
    prepared = pool.typed(in_flight)
    _, first, block = in_flight.popleft()
    total.skipped_resumed += prepared.skipped
    if prepared.last_line <= resume_after:  # wholly committed by an earlier run
        return
    if on_batch is not None:
        on_batch(prepared.lines, set().union(*(kb.scope for kind, kb in prepared.kinds.items()
                                               if KINDS[kind].scope == "escrow")))
    total.add(loader.commit(prepared, partial(block_lines, first, block)))

"""One poll cycle: chain → epochs, model snapshots, escrows → host logs and stats → records → replay → rules.

Epochs are visited oldest first (current − 2, current − 1, current), so escrows about to be pruned
(``DevshardPruningThreshold = 2``) are captured before newer work. Per escrow, the diff log is read from the
``escrow:<id>`` cursor (last ingested nonce) in runs of pages (≤ 64 nonces a page, ``PAGES_PER_CHUNK`` pages a
run, the run's last state root checked against a second host). A few escrows are fetched and decoded at once by
worker threads (``ESCROW_WORKERS``) while this thread commits what they produced: the chunks available at a time
(up to ``COMMIT_RECORDS`` records) go into one transaction together with their cursors, so a cursor never passes
rows that are not committed and a ``kill -9`` anywhere loses at most uncommitted work that the rerun fetches again.
An escrow whose settled log is complete gets an ``escrow-final:<id>`` cursor and is not fetched again.

Epoch finality (``net.epoch_state``, and ``epoch:<E>`` rows in ``api.ingest_status`` whose cursor is the state):

* ``open``: the current epoch; escrows are still being written.
* ``settling``: an earlier epoch with an escrow not yet settled and completely captured, or whose
  ``host_epoch_stats`` have not yet been read identically on two consecutive polls (they are provisional just
  after the transition). Settling epochs are re-polled every cycle: their unfinished escrows and all their host
  epoch stats.
* ``final``: every escrow final, the stats stable (an epoch without escrows: two identical, empty reads) and every
  chain read of the epoch's snapshot succeeded (``reason = 'complete'``), or the epoch left the pruning window
  while settling (``reason = 'pruned'``), or was pruned before any cycle saw it (``reason = 'missed'``). A final
  epoch is not polled again.

Epoch snapshot (:func:`indexer.sources.gonka.snapshots.capture_epoch`, every cycle for every epoch not final): the
epoch record with its heights, model snapshots, ``epoch_params`` (read as of the epoch where the node still has the
height) and, once ended, ``participant_epoch``. A failed read is a warning in the log, a ``net.failure`` row, the
``last_error`` of its ``snapshot:<E>:…`` source in ``api.ingest_status`` and a ``net.snapshot_failure`` row (so
``api.model_limits`` shows a model whose read failed, with the reason); it is retried every cycle.

Progress watchdog (``net.progress``): after each escrow, the host's shard nonce (the source's position) is stored
beside our cursor. When the source is ahead and the cursor has not moved for ``STALL_CYCLES`` consecutive cycles
(a host that stopped serving its log, a decode error at one nonce, …), the poller logs a warning, writes a
``net.failure`` row and sets ``last_error`` of ``escrow:<id>``; ``api.ingest_status.stalled_cycles`` shows the count
from the first stalled cycle on.

What is lost and what is recorded when a source is down for longer than the pruning window: see
:mod:`indexer.poller`.
"""
from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
import time
from urllib.parse import urlsplit
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import psycopg

from indexer.poller.decode import decode_entries, decode_pool
from indexer.poller.store import UPSERT_CURSOR, Store
from indexer.sources.gonka import FetchError, Gonka, HostGroup, RetryPolicy
from indexer.sources.gonka.host import PAGE_NONCES
from indexer.sources.gonka.snapshots import EpochCapture, capture_epoch
from indexer.wire.chain_records import epoch_info_parts
from indexer.wire.diffs import b64encode
from indexer.wire.normalize import (NormalizeError, current_epoch, dumps_record_bytes, epoch_record, escrow_record,
                                    host_epoch_stats_record, host_stats_records, parse_u64)
from indexer.wire.protobuf import WireDecodeError

log = logging.getLogger(__name__)

PRUNING_WINDOW = 2            # DevshardPruningThreshold
PAYLOAD_WORKERS = 4           # concurrent payload requests
ESCROW_WORKERS = 3            # escrows fetched at once while the main thread commits
DECODE_WORKERS = 2            # processes decoding diff runs into NDJSON lines (0: decode in the fetch threads)
PAGES_PER_CHUNK = 16          # 1024 nonces per run of pages (one witness check, one unit of commit)
COMMIT_RECORDS = 20_000       # records per transaction (chunks of several escrows share one)
QUEUE_CHUNKS = 64             # chunks waiting for a commit before the fetchers pause
STALL_CYCLES = 3              # watchdog: consecutive cycles without progress while the source is ahead
POLLER_LOCK_KEY = 0x706F6C6C6572  # 'poller'
VALIDATOR = os.environ.get("GONKA_VALIDATOR_ADDRESS", "gonka1indexer")


@dataclass
class PollSummary:
    epoch: int | None = None
    epochs: list[int] = field(default_factory=list)
    epoch_states: dict[int, str] = field(default_factory=dict)
    escrows: int = 0
    escrows_skipped_final: int = 0
    escrows_pruned: int = 0
    escrows_failed: int = 0
    escrows_stalled: int = 0
    diffs: int = 0
    txs: int = 0
    records: int = 0
    loaded: int = 0
    amended: int = 0
    requests: int = 0
    replayed_escrows: int = 0
    rules_epochs: int = 0
    locked_out: bool = False
    seconds: float = 0.0
    # breakdown (seconds): fetch and decode are summed over the fetch threads, the others are wall time
    t_fetch: float = 0.0
    t_decode: float = 0.0
    t_load: float = 0.0
    t_prepare: float = 0.0  # part of t_load: registering sources and typing lines
    transactions: int = 0
    t_replay: float = 0.0
    t_rules: float = 0.0


@dataclass
class Chunk:
    """What one fetch thread hands to the committing thread: NDJSON lines of one fetch and the cursors they move."""
    escrow_id: str
    lines: list[bytes]
    cursors: dict[str, str]
    diffs: int = 0
    txs: int = 0


@dataclass
class EscrowDone:
    escrow_id: str
    slots: list[str] | None = None  # None: failed (error set)
    error: Exception | None = None
    after: int = 0                   # cursor before this cycle
    nonce: int | None = None         # cursor after this cycle (None: unchanged)
    tip: int | None = None           # the host's shard nonce (source position), when known
    final: bool = False
    found: bool = False              # the chain still has the escrow
    pruned: bool = False             # the chain answered found:false
    t_fetch: float = 0.0
    t_decode: float = 0.0


class _Cancelled(Exception):
    pass


_CURSOR_FAILED = """
INSERT INTO net.cursor (source, last_error, last_error_at, next_retry_at, updated_at)
VALUES (%s, %s, now(), now(), now())
ON CONFLICT (source) DO UPDATE SET last_error = excluded.last_error, last_error_at = now(), updated_at = now()"""

_SNAPSHOT_FAILURE = """
INSERT INTO net.snapshot_failure AS f (source, epoch_index, what, model_id, participant, host, url, error, transient)
VALUES (%(source)s, %(e)s, %(what)s, %(m)s, %(p)s, %(h)s, %(u)s, %(err)s, %(t)s)
ON CONFLICT (source) DO UPDATE SET host = excluded.host, url = excluded.url, error = excluded.error,
    transient = excluded.transient, attempts = f.attempts + 1, last_at = now()"""


class Poller:
    def __init__(self, conn: psycopg.Connection, gonka: Gonka, store: Store, *, validator: str = VALIDATOR,
                 fetch_payloads: bool = True, payload_workers: int = PAYLOAD_WORKERS,
                 escrow_workers: int = ESCROW_WORKERS, decode_workers: int = DECODE_WORKERS) -> None:
        self.conn, self.g, self.store = conn, gonka, store
        self._decoders = decode_pool(decode_workers)
        self.validator, self.fetch_payloads = validator, fetch_payloads
        self.summary = PollSummary()
        self._pool = ThreadPoolExecutor(max_workers=max(1, payload_workers), thread_name_prefix="payloads")
        self._inline_payloads = payload_workers <= 0  # 0: each escrow thread fetches its own payloads in turn
        self._escrow_pool = ThreadPoolExecutor(max_workers=max(1, escrow_workers), thread_name_prefix="escrows")
        self._stop = threading.Event()
        self._snapshot_complete: dict[int, bool] = {}  # epoch -> every chain read of its snapshot succeeded

    def close(self) -> None:
        self._stop.set()
        self._escrow_pool.shutdown(wait=True)
        self._pool.shutdown(wait=True)
        if self._decoders is not None:
            self._decoders.shutdown(wait=True)

    # -- epochs ---------------------------------------------------------------------------------
    def cycle(self) -> PollSummary:
        info = self.g.chain.epoch_info()
        now = current_epoch(info)
        s = self.summary
        s.epoch = now
        s.epochs = [e for e in range(now - PRUNING_WINDOW, now + 1) if e >= 0]
        states = dict(self.conn.execute("SELECT epoch_index, state FROM net.epoch_state").fetchall())
        self._prune_epochs(now, states)
        todo = []
        for epoch in s.epochs:
            if states.get(epoch) == "final":
                s.epoch_states[epoch] = "final"
            else:
                todo.append(epoch)
        if todo:
            settled_versions = self._settled_versions(self._window_start_height(info))
            # chain metadata of every epoch first, then all their escrows through one pipeline (oldest epoch
            # first, so the fetch threads never idle at an epoch boundary), then each epoch's stats and state
            plans = [self.epoch_plan(epoch, info if epoch == now else None) for epoch in todo]
            cursors = self.store.cursors("escrow:")
            jobs = list({eid: (epoch, eid) for epoch, ids, pending in reversed(plans) for eid in pending}.values())
            jobs.sort(key=lambda j: todo.index(j[0]))  # an id listed by two epochs is fetched once, with the older
            done = self._escrows(jobs, settled_versions, cursors)
            for epoch, ids, pending in plans:
                self.epoch_finish(epoch, ids, pending, done)
        self.store.load([], "poll", {"chain": str(now)})
        return s

    def _prune_epochs(self, now: int, states: dict[int, str]) -> None:
        """Epochs that left the window unfinished become final ('pruned'); their unfinished escrows are gaps."""
        final = self.store.cursors("escrow-final:")
        for epoch in sorted(e for e, st in states.items() if st != "final" and e < now - PRUNING_WINDOW):
            rows = self.conn.execute("SELECT escrow_id FROM rec.escrow WHERE epoch_index = %s", (epoch,)).fetchall()
            lost = [eid for (eid,) in rows if f"escrow-final:{eid}" not in final]
            for eid in lost:
                self.store.fail(f"escrow:{eid}", "", f"epoch {epoch} pruned before escrow was final", False)
            if lost:
                log.warning("epoch %s pruned while settling: %d escrow(s) not final", epoch, len(lost))
            self._set_epoch_state(epoch, "final", len(rows), len(rows) - len(lost), None, reason="pruned")
            self.summary.epoch_states[epoch] = "final"
        # epochs that came and went while the poller was away (its last cycle is older than the window)
        if states:
            for epoch in range(max(states) + 1, now - PRUNING_WINDOW):
                log.warning("epoch %s was pruned before the poller saw it", epoch)
                msg = ("epoch pruned before the poller saw it (the poller or its sources were down longer than the "
                       "pruning window)")
                self.store.fail(f"epoch:{epoch}", "", msg, False)
                self._set_epoch_state(epoch, "final", 0, 0, None, reason="missed")
                self.store.error(f"epoch:{epoch}", msg)
                self.summary.epoch_states[epoch] = "final"

    def _set_epoch_state(self, epoch: int, state: str, escrows: int, escrows_final: int, digest: str | None,
                         *, reason: str | None = None, conn: psycopg.Connection | None = None) -> None:
        def write(c: psycopg.Connection) -> None:
            c.execute("""
                INSERT INTO net.epoch_state AS s (epoch_index, state, escrows, escrows_final, stats_digest,
                                                  stats_stable_polls, reason, final_at)
                VALUES (%(e)s, %(st)s, %(n)s, %(nf)s, %(d)s, 0, %(r)s, CASE WHEN %(st)s = 'final' THEN now() END)
                ON CONFLICT (epoch_index) DO UPDATE SET
                    state = excluded.state, escrows = excluded.escrows, escrows_final = excluded.escrows_final,
                    stats_stable_polls = CASE WHEN excluded.stats_digest IS NOT NULL
                                               AND excluded.stats_digest = s.stats_digest
                                              THEN s.stats_stable_polls + 1 ELSE 0 END,
                    stats_digest = COALESCE(excluded.stats_digest, s.stats_digest),
                    reason = excluded.reason, updated_at = now(),
                    final_at = CASE WHEN excluded.state = 'final' THEN COALESCE(s.final_at, now()) END""",
                      {"e": epoch, "st": state, "n": escrows, "nf": escrows_final, "d": digest, "r": reason})
            c.execute(UPSERT_CURSOR, (f"epoch:{epoch}", state))

        if conn is not None:
            write(conn)
        else:
            self.store.load_many([], None, after=write)

    def _window_start_height(self, info: dict) -> int:
        """A height before the window's oldest settlement: current epoch start − (window + 1) epoch lengths. The
        epoch length is ``params.epoch_params.epoch_length`` of the real ``epoch_info``; when it cannot be read the
        search starts at 0 (every settlement the chain made), which is said loudly, never silently."""
        try:
            _, start, length, _ = epoch_info_parts(info)
        except NormalizeError as exc:
            start = length = None
            why = str(exc)
        else:
            why = "epoch_info has no poc_start_block_height or epoch_length"
        if start is None or length is None:
            log.warning("settlement window start unknown (%s): searching settlements from height 0", why)
            self.store.error("chain:epoch_info", f"settlement window start unknown: {why}")
            return 0
        return max(0, start - (PRUNING_WINDOW + 1) * length)

    def _settled_versions(self, min_height: int) -> dict[str, str]:
        """escrow_id → protocol version from its settlement event (state_root_and_protocol_version)."""
        try:
            events = self.g.rpc.escrows_settled(min_height)
        except (FetchError, NormalizeError) as exc:
            self.store.error("rpc:settled", str(exc))
            return {}
        out = {}
        for ev in events:
            v = ev.attributes.get("state_root_and_protocol_version", "")
            if ev.attributes.get("escrow_id") and v.startswith("v"):
                out[ev.attributes["escrow_id"]] = v.split(":")[0]
        return out

    def epoch_plan(self, epoch: int, info: dict | None) -> tuple[int, list[str], list[str]]:
        """Load the epoch's chain metadata; return (epoch, its escrow ids, the ids still to fetch)."""
        cap = capture_epoch(self.g.chain, epoch, ended=epoch < (self.summary.epoch or 0), mapper=self._pool.map)
        records = cap.records
        if info is not None and not any(r["kind"] == "epoch" for r in records):
            records.insert(0, epoch_record(info))  # the root group failed: the current epoch's start is still known
        self._snapshot_complete[epoch] = cap.complete
        self.store.load_many([([dumps_record_bytes(r) for r in records], f"chain:epoch_group_data/{epoch}")], None,
                             after=lambda c: self._snapshot_outcome(cap, c))

        created = self.g.rpc.escrows_created(epoch)
        ids = list(dict.fromkeys(ev.attributes["escrow_id"] for ev in created if ev.attributes.get("escrow_id")))
        ids.sort(key=lambda x: int(x) if x.isdigit() else 0)
        final = self.store.cursors("escrow-final:")
        self.summary.escrows_skipped_final += sum(f"escrow-final:{e}" in final for e in ids)
        return epoch, ids, [e for e in ids if f"escrow-final:{e}" not in final]

    def epoch_finish(self, epoch: int, ids: list[str], pending: list[str], done: dict[str, EscrowDone]) -> None:
        """Host epoch stats of the epoch's participants, and its finality state."""
        participants: dict[str, None] = {}
        n_final = len(ids) - len(pending)
        stored = self._stored_slots([e for e in ids if e not in done])  # final before this cycle
        for escrow_id in ids:
            d = done.get(escrow_id)
            if d is None:
                slots = stored.get(escrow_id, [])
            else:
                n_final += d.final
                slots = d.slots or []
            for addr in slots:
                participants[addr] = None
        stats = self.host_epoch_stats(epoch, list(participants))
        if epoch >= (self.summary.epoch or 0):
            state, digest = "open", None
        else:
            digest = hashlib.sha256(b"\n".join(sorted(dumps_record_bytes(r) for r in stats))).hexdigest()
            prev = self.conn.execute("SELECT stats_digest FROM net.epoch_state WHERE epoch_index = %s",
                                     (epoch,)).fetchone()
            # an epoch without escrows has no stats to wait for: two identical (empty) polls make it stable
            stable = prev is not None and prev[0] == digest and (bool(stats) or not ids)
            complete = self._snapshot_complete.get(epoch, True)  # a failed snapshot read is retried, not frozen
            state = "final" if stable and complete and n_final == len(ids) else "settling"
        self.summary.epoch_states[epoch] = state
        self.store.load_many([([dumps_record_bytes(r) for r in stats], f"chain:devshard_host_epoch_stats/{epoch}")],
                             None, after=lambda c: self._set_epoch_state(
                                 epoch, state, len(ids), n_final, digest,
                                 reason="complete" if state == "final" else None, conn=c))

    def _snapshot_outcome(self, cap: EpochCapture, conn: psycopg.Connection) -> None:
        """Failed snapshot reads: a log line, a net.failure row, ``last_error`` of their ``snapshot:…`` source in
        api.ingest_status, and a net.snapshot_failure row (api.model_limits shows a failed model as a row with
        the reason). Reads that succeed resolve their earlier failure."""
        for f in cap.failures:
            subject = (f"model {f.model_id}" if f.model_id else f"participant {f.participant}" if f.participant
                       else f.what)
            host = urlsplit(f.url).netloc or None
            log.warning("epoch %s %s: chain read failed on %s: %s", f.epoch, subject, host, f.error)
            self.store.fail(f.source, f.url, f.error, f.transient)
            conn.execute(_CURSOR_FAILED, (f.source, f"epoch {f.epoch} {subject} on {host}: {f.error}"[:2000]))
            conn.execute(_SNAPSHOT_FAILURE, {"source": f.source, "e": f.epoch, "what": f.what, "m": f.model_id,
                                             "p": f.participant, "h": host, "u": f.url, "err": f.error[:2000],
                                             "t": f.transient})
        if cap.succeeded:
            resolved = conn.execute("DELETE FROM net.snapshot_failure WHERE source = ANY(%s) RETURNING source",
                                    (cap.succeeded,)).fetchall()
            for (source,) in resolved:
                conn.execute(UPSERT_CURSOR, (source, "ok"))

    def _stored_slots(self, escrow_ids: list[str]) -> dict[str, list[str]]:
        rows = self.conn.execute("SELECT escrow_id, slots FROM rec.escrow WHERE escrow_id = ANY(%s)", (escrow_ids,))
        return {escrow_id: list(slots or []) for escrow_id, slots in rows}

    def host_epoch_stats(self, epoch: int, participants: Sequence[str]) -> list[dict]:
        if epoch >= (self.summary.epoch or 0):
            return []  # stats appear once the epoch's escrows settle

        def one(addr: str) -> dict | None:
            try:
                return host_epoch_stats_record(self.g.chain.host_epoch_stats(epoch, addr))
            except FetchError as exc:
                if exc.transient:
                    raise
                return None

        return [rec for rec in self._pool.map(one, participants) if rec]

    # -- escrows: fetch threads produce chunks, this thread commits them ------------------------
    def _escrows(self, jobs: list[tuple[int, str]], settled_versions: dict[str, str],
                 cursors: dict[str, str]) -> dict[str, EscrowDone]:
        out: dict[str, EscrowDone] = {}
        ids = [eid for _, eid in jobs]
        if not ids:
            return out
        q: queue.Queue = queue.Queue(maxsize=QUEUE_CHUNKS)

        def put(item: Chunk | EscrowDone) -> None:
            while True:
                if self._stop.is_set():
                    raise _Cancelled()
                try:
                    q.put(item, timeout=0.2)
                    return
                except queue.Full:
                    continue

        def job(epoch: int, escrow_id: str) -> None:
            after = int(cursors.get(f"escrow:{escrow_id}") or 0)
            done = EscrowDone(escrow_id, after=after)
            try:
                self.escrow(escrow_id, epoch, settled_versions.get(escrow_id), after, put, done)
            except _Cancelled:
                return
            except Exception as exc:  # noqa: BLE001 - handed to the committing thread, which re-raises it
                done.slots, done.error = None, exc
            try:
                put(done)
            except _Cancelled:
                return

        futures = [self._escrow_pool.submit(job, epoch, eid) for epoch, eid in jobs]
        # this thread gathers and types batch N+1 while the database thread commits batch N (commits stay in
        # order, so a cursor never passes rows that are not committed)
        db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="poller-db") if self.store.pipelined else None
        pending = None
        received = 0
        try:
            while received < len(ids):
                # block until a transaction's worth of records is there (or every escrow is done): each
                # transaction costs a fixed number of statements, so fewer, larger ones are cheaper
                batch: list[Chunk | EscrowDone] = []
                n = 0
                while n < COMMIT_RECORDS and received < len(ids):
                    try:
                        item = q.get(timeout=None if not batch else 0.5)
                    except queue.Empty:
                        break
                    batch.append(item)
                    if isinstance(item, Chunk):
                        n += len(item.lines)
                    else:
                        received += 1
                prepared = self._prepare(batch)
                if db is None:
                    self._commit(batch, prepared, out)
                    continue
                if pending is not None:
                    pending.result()
                pending = db.submit(self._commit, batch, prepared, out)
            if pending is not None:
                pending.result()
        except BaseException:
            self._stop.set()
            raise
        finally:
            if db is not None:
                db.shutdown(wait=True)
        for f in futures:
            f.result()
        return out

    def _prepare(self, batch: list[Chunk | EscrowDone]) -> list:
        """The chunks of a batch as one fetch (one rec.source, one COPY and upsert per kind), typed."""
        chunks = [c for c in batch if isinstance(c, Chunk)]
        if not chunks:
            return []
        uri = "devshard:escrow/" + ",".join(dict.fromkeys(c.escrow_id for c in chunks))
        return self.store.prepare([([line for c in chunks for line in c.lines], uri)])

    def _commit(self, batch: list[Chunk | EscrowDone], prepared: list, out: dict[str, EscrowDone]) -> None:
        """Commit a prepared batch with its cursors, then settle the escrows that finished in it."""
        chunks = [c for c in batch if isinstance(c, Chunk)]
        if chunks:
            cursors: dict[str, str] = {}
            for c in chunks:
                cursors.update(c.cursors)  # chunks of one escrow arrive in order: the last one wins
            res = self.store.commit(prepared, cursors)
            s = self.summary
            s.records += res.lines
            s.loaded += res.loaded
            s.amended += res.amended
            s.diffs += sum(c.diffs for c in chunks)
            s.txs += sum(c.txs for c in chunks)
        for item in batch:
            if isinstance(item, EscrowDone):
                out[item.escrow_id] = self._finish_escrow(item)

    def _finish_escrow(self, done: EscrowDone) -> EscrowDone:
        s = self.summary
        s.t_fetch += done.t_fetch
        s.t_decode += done.t_decode
        s.escrows += done.found
        if done.pruned:
            s.escrows_pruned += 1
            done.slots = self._stored_slots(done.escrow_id)
            if not done.slots:
                self.store.fail(f"escrow:{done.escrow_id}", f"devshard_escrow/{done.escrow_id}",
                                "pruned before capture", False)
            return done
        if done.error is not None:
            exc = done.error
            if not isinstance(exc, (FetchError, NormalizeError, WireDecodeError)):
                raise exc
            s.escrows_failed += 1
            log.warning("escrow %s: %s", done.escrow_id, exc)
            self.store.fail(f"escrow:{done.escrow_id}", getattr(exc, "url", ""), str(exc),
                            getattr(exc, "transient", False))
            self.store.error(f"escrow:{done.escrow_id}", str(exc))
            done.slots = self._stored_slots(done.escrow_id)
        self._watch(done)
        return done

    def _watch(self, done: EscrowDone) -> None:
        """Progress watchdog: count cycles in which the source is ahead of our cursor and the cursor did not move."""
        source = f"escrow:{done.escrow_id}"
        nonce = done.after if done.nonce is None else done.nonce
        row = self.conn.execute("SELECT source_position, cursor_position, stalled_cycles FROM net.progress "
                                "WHERE source = %s", (source,)).fetchone()
        tip = done.tip if done.tip is not None else (row[0] if row and done.error is not None else None)
        if done.final or tip is None:
            stalled = 0
        elif tip > nonce and (nonce == done.after) and (row is None or row[1] is None or row[1] == nonce):
            stalled = (row[2] if row else 0) + 1
        else:
            stalled = 0
        self.conn.execute("""
            INSERT INTO net.progress AS p (source, source_position, cursor_position, stalled_cycles, stalled_since)
            VALUES (%(s)s, %(t)s, %(n)s, %(k)s, CASE WHEN %(k)s > 0 THEN now() END)
            ON CONFLICT (source) DO UPDATE SET source_position = excluded.source_position,
                cursor_position = excluded.cursor_position, stalled_cycles = excluded.stalled_cycles,
                stalled_since = CASE WHEN excluded.stalled_cycles > 0 THEN COALESCE(p.stalled_since, now()) END,
                updated_at = now()""", {"s": source, "t": tip, "n": nonce, "k": stalled})
        if stalled >= STALL_CYCLES:
            self.summary.escrows_stalled += 1
            msg = (f"stalled: source at nonce {tip}, cursor at {nonce}, no progress for {stalled} consecutive "
                   f"cycles")
            log.warning("escrow %s %s", done.escrow_id, msg)
            self.store.fail(source, "", msg, True)
            self.store.error(source, msg)

    def escrow(self, escrow_id: str, epoch: int, version: str | None, after: int,
               emit: Callable[[Chunk | EscrowDone], None], done: EscrowDone) -> None:
        """Fetch one escrow's metadata, log tail and host stats; hand chunks to ``emit`` (runs on a fetch thread)."""
        data = self.g.chain.escrow(escrow_id)
        if data.get("found") is False:
            done.pruned = True  # no database access from fetch threads: the committing thread fills the slots
            return
        done.found = True
        slots = list((data.get("escrow") or {}).get("slots") or [])
        done.slots = slots
        group = HostGroup(escrow_id, version or "", slots, self.g.host,
                          on_skip=lambda a, r, t: self.store.fail(f"host:{a}", f"escrow:{escrow_id}", r, t),
                          full_decode=False)
        try:
            self._escrow_log(escrow_id, epoch, version, after, emit, done, data, group)
        finally:
            done.t_fetch += group.t_fetch
            done.t_decode += group.t_decode

    def _escrow_log(self, escrow_id: str, epoch: int, version: str | None, after: int,
                    emit: Callable[[Chunk | EscrowDone], None], done: EscrowDone, data: dict,
                    group: HostGroup) -> None:
        if not version:
            versions, _ = group.call(lambda h: h.versions())
            if not versions:
                raise FetchError(f"escrow:{escrow_id}", "no host reports a protocol version", transient=True)
            version = versions[0]
            group.version = version
        esc = escrow_record(data, version)
        settled = bool(esc.get("settled"))

        detail = None
        try:
            detail, _ = group.call(lambda h: h.shard_detail(version, escrow_id))
        except FetchError as exc:
            self.store.fail(f"escrow:{escrow_id}", exc.url, f"shard detail: {exc}", exc.transient)
            group.bad.clear()  # the log itself may still be served
        tip = parse_u64(detail["nonce"], "nonce") if detail and detail.get("nonce") is not None else None
        stats = host_stats_records(detail) if detail else []
        done.tip = tip

        pending: list[bytes] = [dumps_record_bytes(esc)]
        nonce = after
        complete = False
        diffs_n = txs_n = 0
        while True:
            if tip is not None and nonce >= tip:
                complete = True
                break
            first = nonce + 1
            want = PAGE_NONCES * PAGES_PER_CHUNK
            last = nonce + want if tip is None else min(tip, nonce + want)
            diffs = group.page(first, last)  # headers only: nonce, state root, the entry
            if diffs:
                try:
                    lines, ntx = self._records(escrow_id, version, epoch, diffs, group, done)
                except (WireDecodeError, NormalizeError) as exc:
                    # the serving member's txs do not decode: skip it and read the run from another member
                    if group.primary is None:
                        raise
                    group._skip(group.primary, f"diffs {first}..{diffs[-1]['nonce']}: {exc}", False)
                    continue
                pending.extend(lines)
                nonce = diffs[-1]["nonce"]
                diffs_n += len(diffs)
                txs_n += ntx
            if len(diffs) < last - first + 1:  # the end of what the hosts have
                complete = tip is None or nonce >= tip
                break
            emit(self._chunk(escrow_id, pending, nonce, False, diffs_n, txs_n, done))
            pending, diffs_n, txs_n = [], 0, 0
        if complete:
            pending.extend(dumps_record_bytes(r) for r in stats)
        final = complete and settled and bool(stats)
        emit(self._chunk(escrow_id, pending, nonce, final, diffs_n, txs_n, done))
        done.nonce, done.final = nonce, final

    def _chunk(self, escrow_id: str, lines: list[bytes], nonce: int, final: bool, diffs: int, txs: int,
               done: EscrowDone) -> Chunk:
        done.nonce = nonce  # committed by the time the watchdog looks (chunks commit before their escrow's end)
        cursors = {f"escrow:{escrow_id}": str(nonce)}
        if final:
            cursors[f"escrow-final:{escrow_id}"] = str(nonce)
        return Chunk(escrow_id, lines, cursors, diffs, txs)

    def _records(self, escrow_id: str, version: str, epoch: int, diffs: list[dict], group: HostGroup,
                 done: EscrowDone) -> tuple[list[bytes], int]:
        """NDJSON lines of a run of diffs (decoded in the process pool), 0/0 Finish payloads fetched and filled in."""
        t0 = time.perf_counter()
        entries = [d["entry"] for d in diffs]
        if self._decoders is not None:
            dec = self._decoders.submit(decode_entries, escrow_id, version, entries, self.fetch_payloads).result()
        else:
            dec = decode_entries(escrow_id, version, entries, self.fetch_payloads)
        done.t_decode += time.perf_counter() - t0
        lines = dec.lines
        if dec.held:
            wanted = [rec["inference_id"] for _, rec in dec.held]
            # payload requests are independent and many: fetch them concurrently (the HTTP client is thread-safe)
            fetch = lambda iid: self._payload(group, version, escrow_id, iid, epoch)  # noqa: E731
            bodies = map(fetch, wanted) if self._inline_payloads else self._pool.map(fetch, wanted)
            for (pos, rec), body in zip(dec.held, bodies):
                if body is not None:
                    rec["response_payload"] = body
                lines[pos] = dumps_record_bytes(rec)
        return lines, dec.txs  # type: ignore[return-value]

    def _payload(self, group: HostGroup, version: str, escrow_id: str, inference_id: int, epoch: int) -> str | None:
        for address in group.candidates():
            try:
                host = self.g.host(address)
                if host is None:
                    continue
                data = host.payload(version, escrow_id, inference_id, validator=self.validator, epoch=epoch)
            except FetchError as exc:
                if exc.transient:
                    continue
                return None  # 401/403/404: not available to us
            body = data.get("response_payload") if isinstance(data, dict) else None
            if isinstance(body, (bytes, bytearray)):
                body = b64encode(bytes(body))
            return body if isinstance(body, str) else None
        return None


def poll_once(url: str, chain_urls: str | Sequence[str], rpc_url: str | Sequence[str], *,
              policy: RetryPolicy | None = None, process: bool = True, archive: bool = True,
              fetch_payloads: bool = True, payload_workers: int = PAYLOAD_WORKERS,
              escrow_workers: int = ESCROW_WORKERS, decode_workers: int = DECODE_WORKERS) -> PollSummary:
    """One full cycle into the database at ``url``. A cycle that cannot take the poller lock does nothing."""
    from indexer.load.ingest import ANALYZE_AFTER_ROWS, analyze_records
    from indexer.replay.run import REPLAY_WORKERS, replay_dirty
    from indexer.rules.run import run_rules

    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        if not conn.execute("SELECT pg_try_advisory_lock(%s)", (POLLER_LOCK_KEY,)).fetchone()[0]:
            return PollSummary(locked_out=True)
        try:
            store = Store(conn, archive=archive, side_url=url)
            with Gonka(chain_urls, rpc_url, policy=policy, on_response=store.on_response,
                       on_failure=store.on_failure) as gonka:
                poller = Poller(conn, gonka, store, fetch_payloads=fetch_payloads, payload_workers=payload_workers,
                                escrow_workers=escrow_workers, decode_workers=decode_workers)
                try:
                    summary = poller.cycle()
                except Exception as exc:
                    store.error("chain", f"{type(exc).__name__}: {exc}")
                    raise
                finally:
                    poller.close()
                    poller.summary.requests = gonka.requests()
                    store.flush()
                    store.close()
            summary.t_load = store.seconds
            summary.t_prepare, summary.transactions = store.t_prepare, store.transactions
            if process:
                t0 = time.perf_counter()
                if summary.loaded >= ANALYZE_AFTER_ROWS:  # fresh statistics for the replay's and rules' plans
                    analyze_records(conn)
                summary.replayed_escrows = replay_dirty(conn, url=url, workers=REPLAY_WORKERS).escrows
                t1 = time.perf_counter()
                summary.rules_epochs = run_rules(conn).epochs
                summary.t_replay, summary.t_rules = t1 - t0, time.perf_counter() - t1
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (POLLER_LOCK_KEY,))
    summary.seconds = time.perf_counter() - start
    return summary

"""The commit side of the poller: escrows are fetched a few at a time on fetch threads (:mod:`indexer.poller.fetch`)
while this side gathers their chunks and commits them, in order, with their cursors.

The chunks available at a time (up to ``COMMIT_RECORDS`` records) go into one transaction together with their
cursors, so a cursor never passes rows that are not committed and a ``kill -9`` anywhere loses at most uncommitted
work that the rerun fetches again. With a side connection the next batch is typed while the previous one commits.

After each escrow, the progress watchdog (``net.progress``) stores the host's shard nonce (the source's position)
beside our cursor. When the source is ahead and the cursor has not moved for ``STALL_CYCLES`` consecutive cycles (a
host that stopped serving its log, a decode error at one nonce, …), it logs a warning, writes a ``net.failure`` row
and sets ``last_error`` of ``escrow:<id>``; ``api.ingest_status.stalled_cycles`` shows the count.

Leases (:mod:`indexer.poller.leases`: several pollers may share one database): a fetch thread takes the escrow's
``escrow:<id>`` lease before anything else and reads its cursor afresh (another poller may have moved it since the
cycle listed its escrows); an escrow another poller holds, or did during this cycle, is handed over as
:class:`Skipped`. Every commit of rows and cursors is fenced by the leases of the escrows it carries; an escrow's
lease is released once its outcome is written. The outcome writes themselves are not fenced: the
``net.failure`` rows (:meth:`Store.fail`, queued and written with whichever transaction comes next),
``last_error`` (:meth:`Store.error`) and the watchdog's ``net.progress`` row (:meth:`Store.set_progress`) that
:meth:`EscrowCommitter._finish_escrow` writes go to the database without a lease check.
"""
from __future__ import annotations

import logging
import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from indexer.poller.awaited import remember
from indexer.poller.decode import DecodeWorkerLost
from indexer.poller.fetch import Cancelled, Chunk, EscrowDone, EscrowFetcher
from indexer.poller.settled import Settlement
from indexer.poller.leases import Leases
from indexer.poller.store import Store
from indexer.sources.gonka import FetchError
from indexer.wire.normalize import NormalizeError
from indexer.wire.errors import WireDecodeError

log = logging.getLogger(__name__)

ESCROW_WORKERS = 3            # escrows fetched at once while the main thread commits
COMMIT_RECORDS = 20_000       # records per transaction (chunks of several escrows share one)
QUEUE_CHUNKS = 64             # chunks waiting for a commit before the fetchers pause
STALL_CYCLES = 3              # watchdog: consecutive cycles without progress while the source is ahead
# Errors that belong to one escrow: it is recorded as failed and the cycle goes on. Anything else is a bug or a
# database failure and ends the cycle.
ESCROW_ERRORS = (FetchError, NormalizeError, WireDecodeError, DecodeWorkerLost)


@dataclass(frozen=True)
class Skipped:
    """An escrow this poller did not fetch: ``held`` by another poller's live lease, or ``done`` (its lease was
    released during this cycle, or it is final by now)."""
    escrow_id: str
    why: str


class EscrowCommitter:
    def __init__(self, fetcher: EscrowFetcher, store: Store, summary, *, leases: Leases,
                 escrow_workers: int = ESCROW_WORKERS):
        self.fetcher, self.store, self.summary = fetcher, store, summary
        self.leases = leases  # every escrow is fetched and committed under its ``escrow:<id>`` lease
        self.skipped: dict[str, str] = {}  # escrow id -> why (Skipped.why), of the last run
        self._pool = ThreadPoolExecutor(max_workers=max(1, escrow_workers), thread_name_prefix="escrows")

    def close(self) -> None:
        self.fetcher.stop.set()
        self._pool.shutdown(wait=True)

    def run(self, jobs: list[tuple[int, str]], settlements: dict[str, Settlement]) -> dict[str, EscrowDone]:
        """Fetch and commit every (epoch, escrow id) job; return each escrow's outcome. Each job reads its escrow's
        cursor after taking its lease (:meth:`_lease`)."""
        out: dict[str, EscrowDone] = {}
        self.skipped = {}
        if not jobs:
            return out
        q: queue.Queue = queue.Queue(maxsize=QUEUE_CHUNKS)
        stop = self.fetcher.stop

        def put(item: Chunk | EscrowDone) -> None:
            while True:
                if stop.is_set():
                    raise Cancelled()
                try:
                    q.put(item, timeout=0.2)
                    return
                except queue.Full:
                    continue

        def job(epoch: int, escrow_id: str) -> None:
            try:
                skip, after = self._lease(escrow_id)
            except Exception as exc:  # noqa: BLE001 - a database failure: the committing thread ends the cycle
                skip = EscrowDone(escrow_id, slots=None, error=exc)
            if skip is not None:
                try:
                    put(skip)
                except Cancelled:
                    pass
                return
            done = EscrowDone(escrow_id, after=after)
            try:
                self.fetcher.fetch(escrow_id, epoch, settlements.get(escrow_id), done.after, put, done)
            except Cancelled:
                return
            except Exception as exc:  # noqa: BLE001 - handed to the committing thread, which decides
                done.slots, done.error = None, exc
            try:
                put(done)
            except Cancelled:
                return

        futures = [self._pool.submit(job, epoch, eid) for epoch, eid in jobs]
        # this thread gathers and types batch N+1 while the database thread commits batch N (commits stay in
        # order, so a cursor never passes rows that are not committed)
        db = (ThreadPoolExecutor(max_workers=1, thread_name_prefix="poller-db") if self.store.concurrent_prepare
              else None)
        pending = None
        received = 0
        try:
            while received < len(jobs):
                # block until a transaction's worth of records is there (or every escrow is done): each
                # transaction costs a fixed number of statements, so fewer, larger ones are cheaper
                batch: list[Chunk | EscrowDone] = []
                n = 0
                while n < COMMIT_RECORDS and received < len(jobs):
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
            stop.set()
            raise
        finally:
            if db is not None:
                db.shutdown(wait=True)
        for f in futures:
            f.result()
        return out

    def _lease(self, escrow_id: str) -> tuple[Skipped | None, int]:
        """Take the escrow's lease; return (None, its committed cursor) when this poller is to fetch it, else
        (Skipped, 0)."""
        taken = self.leases.take(f"escrow:{escrow_id}")
        if taken.outcome != "taken":
            return Skipped(escrow_id, taken.outcome), 0
        after, final = self.leases.escrow_cursors(escrow_id)
        if final:  # another poller finished it after this cycle listed it
            self.leases.release([f"escrow:{escrow_id}"])
            return Skipped(escrow_id, "done"), 0
        return None, after

    def _prepare(self, batch: list[Chunk | EscrowDone]) -> list:
        """The chunks of a batch as one fetch (one rec.source, one COPY and upsert per kind), typed."""
        chunks = [c for c in batch if isinstance(c, Chunk)]
        if not chunks:
            return []
        uri = "devshard:escrow/" + ",".join(dict.fromkeys(c.escrow_id for c in chunks))
        lines: list[bytes] = []
        parts: list = []
        untyped: list[int] = []
        for c in chunks:  # one source: the chunks' lines in order, their typed parts shifted to where they land
            parts.extend((len(lines) + offset, part) for offset, part in c.parts)
            untyped.extend(len(lines) + pos for pos in c.untyped)
            lines.extend(c.lines)
        return self.store.prepare_typed(lines, uri, parts, untyped)

    def _commit(self, batch: list[Chunk | EscrowDone | Skipped], prepared: list,
                out: dict[str, EscrowDone]) -> None:
        """Commit a prepared batch with its cursors, then settle the escrows that finished in it."""
        chunks = [c for c in batch if isinstance(c, Chunk)]
        if chunks:
            cursors: dict[str, str] = {}
            for c in chunks:
                cursors.update(c.cursors)  # chunks of one escrow arrive in order: the last one wins
            fence = sorted({f"escrow:{c.escrow_id}" for c in chunks})
            # Finishes stored without their payload are remembered in the same transaction, to be asked again
            # (indexer.poller.awaited)
            awaited = [a for c in chunks for a in c.awaited]
            after = (lambda conn: remember(conn, awaited)) if awaited else None
            res = self.store.commit(prepared, cursors, after=after, fence=fence)
            s = self.summary
            s.records += res.lines
            s.loaded += res.loaded
            s.amended += res.amended
            s.diffs += sum(c.diffs for c in chunks)
            s.txs += sum(c.txs for c in chunks)
        for item in batch:
            if isinstance(item, EscrowDone):
                out[item.escrow_id] = self._finish_escrow(item)
                # its rows, cursors and watchdog state are written by now
                self.leases.release([f"escrow:{item.escrow_id}"])
            elif isinstance(item, Skipped):
                self.skipped[item.escrow_id] = item.why

    def _finish_escrow(self, done: EscrowDone) -> EscrowDone:
        s = self.summary
        s.t_fetch += done.t_fetch
        s.t_decode += done.t_decode
        s.escrows += done.found
        source = f"escrow:{done.escrow_id}"
        for address, why in done.rejected:  # a member whose log failed the signed check: on its own status row
            self.store.error(f"host:{address}", why)
        if done.pruned:
            done.slots = self.store.stored_slots([done.escrow_id]).get(done.escrow_id, [])
            if done.slots and self.store.captured_whole([done.escrow_id]):
                # the log was captured whole and a settlement stored (read over the REST only: /tx was still
                # being asked for it): nothing of the escrow was lost and nothing more can be read of it (a
                # pruned escrow is not fetched, so /tx is not asked again), so it is final as it stands: marked
                # so, it is not fetched again and counts as final in its epoch. Its verification says why it
                # stays at replayed.
                self.store.load_many([], {f"escrow-final:{done.escrow_id}": str(done.after)},
                                     fence=(f"escrow:{done.escrow_id}",))
                done.final = True
                log.info("escrow %s pruned on chain after its log was captured whole (nonce %s): final, with its "
                         "settlement as read over the REST", done.escrow_id, done.after)
                return done
            # a job is never final yet, so whatever the chain pruned before this fetch is a gap: say so in
            # net.failure and on the escrow's api.ingest_status row (its cursor, if any, stays where it was)
            s.escrows_pruned += 1
            msg = ("pruned before capture" if not done.slots else
                   f"pruned before its log was final (captured up to nonce {done.after})")
            if done.slots and self.store.settlement_lost(done.escrow_id):
                # read on every cycle since it settled, never served: the settled check can never be made for it
                msg += ("; its settlement transaction was never read, and is lost (the reasons of each read are "
                        "in api.source_errors)")
            self.store.fail(source, f"devshard_escrow/{done.escrow_id}", msg, False)
            self.store.error(source, msg)
            return done
        if done.error is not None:
            exc = done.error
            if not isinstance(exc, ESCROW_ERRORS):
                raise exc
            s.escrows_failed += 1
            log.warning("escrow %s: %s", done.escrow_id, exc)
            self.store.fail(source, getattr(exc, "url", ""), str(exc), getattr(exc, "transient", False))
            self.store.error(source, str(exc))
            done.slots = self.store.stored_slots([done.escrow_id]).get(done.escrow_id, [])
        self._watch(done)
        return done

    def _watch(self, done: EscrowDone) -> None:
        """Progress watchdog: count cycles in which the source is ahead of our cursor and the cursor did not move."""
        source = f"escrow:{done.escrow_id}"
        nonce = done.after if done.nonce is None else done.nonce
        row = self.store.progress(source)
        tip = done.tip if done.tip is not None else (row[0] if row and done.error is not None else None)
        if done.final or tip is None:
            stalled = 0
        elif tip > nonce and (nonce == done.after) and (row is None or row[1] is None or row[1] == nonce):
            stalled = (row[2] if row else 0) + 1
        else:
            stalled = 0
        self.store.set_progress(source, tip, nonce, stalled)
        if stalled >= STALL_CYCLES:
            self.summary.escrows_stalled += 1
            msg = (f"stalled: source at nonce {tip}, cursor at {nonce}, no progress for {stalled} consecutive "
                   f"cycles")
            log.warning("escrow %s %s", done.escrow_id, msg)
            self.store.fail(source, "", msg, True)
            self.store.error(source, msg)

"""Replay that follows a long load, on the core the load leaves free.

A load is one committing connection: while the server writes a batch, the replay of the escrows already loaded
can run beside it instead of after the whole file. :class:`ReplayFollower` is a process that replays dirty escrows
as batches commit. It never takes an escrow the batch being committed or the one before it touches: the loader
names each batch's escrows just before its commit, and in a file ordered by escrow an escrow's next lines may be
in the next batch, whose dirty mark would then wait for the follower's chunk to commit (a loader that marks an
escrow the follower holds waits on its row; naming the batch after its commit, as the first version did, left a
window in which the follower took the newest batch's escrows: four such waits of 11-90 ms in one 978k-line load).
It takes an escrow once two later batches have moved past it. Whatever is still dirty when the load ends (those
escrows, or anything the follower did not get to) is replayed by the follower when it is at most one chunk (the
pass afterwards would give it one worker process of its own: the follower is that process, started and connected
while the load ran), else by the usual pass afterwards (:func:`indexer.downstream.process_changes`), which replays
with several workers.

The process starts at the first batch, whatever the load's size, but replays during the load only once
FOLLOW_AFTER_LINES lines are loaded; before that it only waits, so a short load keeps the simple order (load, then
replay) and its replay pays no process start or connection after the load.

Nothing depends on the follower: the work queue is ``replay.dirty_escrow`` (claims with SKIP LOCKED, a chunk a
transaction), so a follower that fails or is killed leaves its unfinished chunk dirty, and the pass after the load
replays it (an escrow whose replay kills the follower is then held by that pass: indexer.replay.run). The load never
waits for it (a batch's escrows are sent over a pipe, and only the newest two lists count); the end of the load waits
only for the chunk it is replaying and a remainder of at most one chunk.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Iterable

import psycopg

from indexer.db.durability import commit_without_flush_wait
from indexer.replay.run import CHUNK_ESCROWS, CHUNK_TXS, ReplaySummary, replay_chunk, replay_loop
from indexer.workers import exit_with_parent, keep_freed_memory, sigint_blocked

log = logging.getLogger(__name__)

# Replays during the load once this many lines are committed: a shorter load gains less than its batches' waits cost,
# and keeps the simple order (load, then replay) that small inputs and most tests see.
FOLLOW_AFTER_LINES = 100_000


class ReplayFollower:
    """``batch(lines, escrows)`` just before each batch commits; ``finish()`` when the load is done (returns what
    the follower replayed), after ``wind_down()`` if the caller has work to do meanwhile. A context manager: leaving
    it stops a follower still running."""

    def __init__(self, url: str, *, after_lines: int = FOLLOW_AFTER_LINES, chunk: int = CHUNK_ESCROWS,
                 txs: int = CHUNK_TXS) -> None:
        self.url, self.after_lines, self.chunk, self.txs = url, after_lines, chunk, txs
        self.lines = 0
        self._told = False  # the stop message is sent (wind_down)
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._send = None
        self._results = None

    def __enter__(self) -> "ReplayFollower":
        return self

    def __exit__(self, *exc) -> None:
        self._stop(kill=True)

    def batch(self, lines: int, escrows: Iterable[str]) -> None:
        """A batch of ``lines`` touching ``escrows`` is about to commit: the follower keeps off those escrows and the
        previous batch's, and may replay the others that are dirty."""
        self.lines += lines
        if self._proc is None:  # at the first batch: it connects while the load goes on, then waits
            self._start()
        if self.lines < self.after_lines:
            return
        try:
            self._send.send(sorted(escrows))
        except (BrokenPipeError, OSError):  # the follower is gone: the pass after the load does its work
            pass

    def wind_down(self) -> None:
        """Tell the follower the load is over without waiting for it: its last chunk and the remainder replay while
        the caller goes on (opening the downstream stage's connection), until :meth:`finish`."""
        if self._proc is not None and not self._told:
            self._told = True
            self._tell(None)

    def finish(self, *, catch_up: bool = False) -> ReplaySummary:
        """Stop the follower after the chunk it is replaying and the remainder, if at most one chunk is left
        (:func:`_replay_remainder`), and return what it replayed (empty if it never started or failed: then its
        escrows are still dirty). What it has not reached is left to the pass after the load, which replays with
        several workers. With ``catch_up`` (unless :meth:`wind_down` told it to stop already), it first replays
        everything dirty but the last two batches' escrows (a test's way to know it did work). The summary's seconds
        are how long this call waited: the part of the follower's work that outlasted the load (and whatever the
        caller did after :meth:`wind_down`), which the replay's time must count."""
        start = time.perf_counter()
        summary = self._stop(kill=False, catch_up=catch_up)
        summary.seconds = time.perf_counter() - start
        return summary

    def _start(self) -> None:
        ctx = multiprocessing.get_context("fork")  # inherits the imported replay machine; never touches our conn
        receive, self._send = ctx.Pipe(duplex=False)
        self._results, report = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_follow, args=(self.url, self.chunk, self.txs, receive, report, os.getpid()),
                                 name="replay-follower", daemon=True)
        with sigint_blocked():
            self._proc.start()
        receive.close()
        report.close()

    def _stop(self, *, kill: bool, catch_up: bool = False) -> ReplaySummary:
        proc, summary = self._proc, ReplaySummary()
        if proc is None:
            return summary
        self._proc = None
        if kill:
            proc.kill()
        else:
            if not self._told:
                self._tell(_CATCH_UP if catch_up else None)
            try:
                summary = self._results.recv()
            except (EOFError, OSError):
                log.warning("replay follower ended without a result (exit code %s): its escrows are replayed after "
                            "the load", proc.exitcode)
        proc.join()
        self._send.close()
        self._results.close()
        return summary

    def _tell(self, message) -> None:
        try:
            self._send.send(message)
        except (BrokenPipeError, OSError):  # gone: _stop finds out when no result comes
            pass


_CATCH_UP = "catch up"  # the stop message that first finishes the pass over what was dirty before the last batch


def _follow(url: str, chunk: int, txs: int, receive, report, owner: int) -> None:
    """The follower process: after each batch message (that batch's escrows), replay what is dirty but those and
    the previous batch's, a chunk at a time, taking newer batch messages between chunks; stop between chunks on
    None, or after a last such pass on _CATCH_UP; then replay the remainder if it is one chunk (_replay_remainder),
    and report. A chunk holds at most ``txs`` txs in memory at once (an escrow larger than that alone), so the
    follower's peak does not grow with the escrows' size."""
    exit_with_parent(owner)
    keep_freed_memory()
    summary = ReplaySummary()
    batches: deque = deque(maxlen=2)  # the escrows of the batch being committed and of the one before it
    # their union, changed in place: replay_loop reads it at every claim, so a pass that outlives several batches
    # keeps off the newest ones (a list handed over by value kept a pass on escrows six batches old)
    held: list = []
    stop = catch_up = False

    def take_messages() -> bool:
        """Read what arrived; True when the current pass should end (a stop without catch-up)."""
        nonlocal stop, catch_up
        while not stop and receive.poll():
            message = receive.recv()
            if message is None or message == _CATCH_UP:
                stop, catch_up = True, message == _CATCH_UP
            else:
                batches.append(message)
                held[:] = sorted(set().union(*batches))
        return stop and not catch_up

    try:
        with psycopg.connect(url) as conn:
            # a chunk's rows and the claims of its marks are one transaction: a server crash that loses its
            # unflushed commit leaves those escrows dirty for the next replay (ingest_file says why it is off)
            commit_without_flush_wait(conn)
            conn.commit()
            while not stop:
                if not receive.poll(None):  # block until the next message
                    break
                if take_messages():
                    break
                if batches:
                    replay_loop(conn, chunk, summary, hold=held, stop=take_messages, txs=txs)
            if stop:  # told the load is over (not a closed pipe): nothing is committing, so nothing is held
                _replay_remainder(conn, chunk, summary, txs)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the pass after the load replays what is left
        log.warning("replay follower stopped: %s", exc)
        return
    report.send(summary)


def _replay_remainder(conn: psycopg.Connection, chunk: int, summary: ReplaySummary, txs: int) -> None:
    """After the load: what is still dirty, when it is at most one chunk. The pass after the load would replay it in
    one worker process of its own (indexer.replay.run.replay_dirty: a worker a chunk), which would have to start and
    connect first; this process is one, ready. More than a chunk is left to that pass, which uses several. A failure
    here rolls the chunk back (its escrows stay dirty for that pass) and keeps what the follower replayed before
    in ``summary``: counted only once the chunk has committed."""
    try:
        with conn.transaction():
            dirty = conn.execute("SELECT count(*) FROM (SELECT FROM replay.dirty_escrow LIMIT %s) d",
                                 (chunk + 1,)).fetchone()[0]
        if 0 < dirty <= chunk:
            part = ReplaySummary()
            replay_chunk(conn, chunk, part, txs=txs)
            summary.add(part)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the pass after the load replays these escrows
        log.warning("replay follower: the remainder after the load is left to the pass after it: %s",
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)

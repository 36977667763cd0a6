"""The file load's typing (indexer.load.ingest): blocks of lines typed by :func:`prepare_file_block` in a pool of
processes that outlives a process that dies under it, or, for an input of one block, in the loading process itself
(:class:`InlineTyping`)."""
from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

from indexer import workers
from indexer.load.prepare import Prepared, prepare_file_block
from indexer.load.typed import printable
from indexer.sources import ndjson
from indexer.sources.ndjson import LongLine

log = logging.getLogger(__name__)


class TypingWorkerLost(RuntimeError):
    """A typing process died (killed, out of memory, a crash in native code) on the same block twice, the second
    time typing it alone."""

    def __init__(self, first: int, last: int):
        super().__init__("killed, out of memory or crashed")
        self.first, self.last = first, last


class TypingPool:
    """The typing processes of one file. A process that dies breaks its pool for good (every block in flight
    fails): :meth:`typed` then starts a new pool and types the blocks in flight again."""

    def __init__(self, processes: int, source_id: int, resume_after: int) -> None:
        self.processes, self.source_id, self.resume_after = processes, source_id, resume_after
        self.pool = workers.pool(processes, bulk_memory=True)

    def __enter__(self) -> "TypingPool":
        return self

    def __exit__(self, *exc) -> bool:
        return self.pool.__exit__(*exc)

    def submit(self, first: int, block: bytes | LongLine) -> tuple:
        """(future, first, block): ``block`` (lines numbered from ``first``) typed in a worker."""
        if isinstance(block, LongLine):  # nothing to type: the line is quarantined as it is
            future = Future()
            future.set_result(long_line_prepared(self.source_id, block, self.resume_after))
            return future, first, block
        try:
            future = self.pool.submit(prepare_file_block, self.source_id, first, block, self.resume_after)
        except BrokenProcessPool as exc:  # a worker died since the last block: typed() finds out and types it again
            future = Future()
            future.set_exception(exc)
        return future, first, block

    def typed(self, in_flight: deque) -> Prepared:
        """The oldest block in flight, typed. When a worker died, the block is typed again alone, in a process of its
        own (so a death is put on the block that causes it, not on the blocks beside it), and the rest in flight go
        to a new pool. A block that kills its worker alone too ends the load: the batches before it are committed,
        and a rerun resumes after them (a worker killed for the machine's memory may well live the next time)."""
        try:
            return in_flight[0][0].result()
        except BrokenProcessPool:
            log.warning("a typing process died: starting new ones for the %d block(s) in flight", len(in_flight))
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = workers.pool(self.processes, bulk_memory=True)
        for i in range(1, len(in_flight)):
            in_flight[i] = self.submit(*in_flight[i][1:])
        _, first, block = in_flight[0]
        try:
            return workers.run_alone(prepare_file_block, self.source_id, first, block, self.resume_after,
                                     bulk_memory=True)
        except BrokenProcessPool as exc:
            raise TypingWorkerLost(first, first + block.count(b"\n", 0, len(block) - 1)) from exc


class InlineTyping:
    """:class:`TypingPool`'s interface, typing in the calling process: for an input that is one block, where a pool
    types that block while the loader only waits for it, so its processes would cost their start (~10 ms of a
    one-line amendment's ingest) and the block's trips through pipes, and run nothing in parallel. The rows are the
    pool's: the same function types the block."""

    def __init__(self, source_id: int, resume_after: int) -> None:
        self.source_id, self.resume_after = source_id, resume_after

    def __enter__(self) -> "InlineTyping":
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def submit(self, first: int, block: bytes | LongLine) -> tuple:
        """(future, first, block): ``block`` typed now, the future holding its result."""
        future = Future()
        future.set_result(long_line_prepared(self.source_id, block, self.resume_after) if isinstance(block, LongLine)
                          else prepare_file_block(self.source_id, first, block, self.resume_after))
        return future, first, block

    def typed(self, in_flight: deque) -> Prepared:
        return in_flight[0][0].result()


def long_line_prepared(source_id: int, long_line: LongLine, resume_after: int) -> Prepared:
    """The batch of a line past MAX_LINE_BYTES: its quarantine row, with the line's first bytes (or, at or before
    the resume cursor, only its count)."""
    number = long_line.line
    if number <= resume_after:
        return Prepared(0, number, {}, [], skipped=1)
    reason = f"line of {long_line.size} bytes, over the {ndjson.MAX_LINE_BYTES}-byte limit: read past, not loaded"
    raw = printable(long_line.head) + f" … ({long_line.size - len(long_line.head)} more bytes not kept)"
    return Prepared(1, number, {}, [(source_id, number, None, reason, raw)])

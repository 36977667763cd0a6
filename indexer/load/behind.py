"""Statistics of the epochs a load has moved past, taken beside the load instead of after it.

The replay and the rules plan each epoch against its partitions' statistics, so the load ends with an ANALYZE of
every partition it grew (indexer.load.partitions.analyze_written): ten epochs of ten tables, 0.4-1 s on the
critical path of a 1M-line load. Most of those partitions stop growing long before the load ends: a file, in
either record order, goes through its epochs roughly in turn. :class:`AnalyzeBehind` takes the epochs of each
committed batch; an epoch that none of the last ``keep`` batches wrote is analysed then, on a connection of its
own in a thread (the loader's connection is busy with the next batch, and the server has a second core). The
load's final pass applies the same rule as ever (a partition whose heap grew by more than a tenth since its
statistics were taken), so an epoch written again after its early ANALYZE is analysed again there, and one that
was not is skipped: nothing about which statistics the replay sees changes, only when they were taken.

Only an optimisation: a failure here (the connection refused, the server gone) is logged and the thread stops;
the final pass analyses whatever it left.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections import deque

import psycopg

from indexer.db.quickstats import Deferred
from indexer.load.partitions import ROUTED, UNASSIGNED, analyze_written
from indexer.records import KINDS

log = logging.getLogger(__name__)

KEEP_BATCHES = 2  # an epoch is "moved past" when this many batches in a row did not write it
_PARENTS = sorted(f"rec.{KINDS[kind].table}" for kind in ROUTED)


class AnalyzeBehind:
    """``batch(epochs)`` after each committed batch; ``close()`` when the load ends, returns what was skipped
    because another session held it. A context manager: leaving it stops the thread."""

    def __init__(self, url: str, keep: int = KEEP_BATCHES) -> None:
        self.url = url
        self.recent: deque = deque(maxlen=keep)
        self.pending: set[int] = set()  # written, not yet handed to the thread
        self.analyzed: list[int] = []  # the epochs the thread went through, in order (read after close)
        self.deferred = Deferred()
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "AnalyzeBehind":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def batch(self, epochs: set[int]) -> None:
        written = {e for e in epochs if e != UNASSIGNED}  # rows leave the unassigned partition as escrows load
        self.recent.append(written)
        self.pending |= written
        if len(self.recent) < self.recent.maxlen:
            return
        passed = sorted(self.pending - set().union(*self.recent))
        if not passed:
            return
        self.pending -= set(passed)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="analyze-behind", daemon=True)
            self._thread.start()
        self._work.put(passed)

    def close(self) -> Deferred:
        if self._thread is not None:
            self._work.put(None)
            self._thread.join()
            self._thread = None
        return self.deferred

    def _run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while (epochs := self._work.get()) is not None:
                    self.deferred.add(analyze_written(conn, _PARENTS, epochs))
                    self.analyzed.extend(epochs)
        except psycopg.Error as exc:  # the final pass of the load analyses what this left
            log.warning("analysing the epochs behind the load stopped: %s", str(exc).split("\n", 1)[0])
            while self._work.get() is not None:  # drain until close(): batch() never blocks on a dead thread
                pass

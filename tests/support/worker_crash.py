"""Tasks that kill the worker process running them, for tests/poller/test_poller_decode_workers.py and
tests/load/test_reliability_workers.py. Module-level functions, so that a worker can unpickle them by name."""
from __future__ import annotations

import os
import signal
from pathlib import Path

from indexer.load.prepare import prepare_file_block
from indexer.poller.decode import decode_entries


def die() -> None:
    """What an out-of-memory kill does to a worker: SIGKILL, no exception, no cleanup."""
    os.kill(os.getpid(), signal.SIGKILL)


def die_once(marker: str, value: int) -> int:
    """Kill the worker the first time (``marker`` does not exist yet), return ``value`` on the next try."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died once")
        die()
    return value


def twice(value: int) -> int:
    return value * 2


def decode_or_die(doomed: frozenset, escrow_id: str, *args):
    """The poller's decode, but a run of an escrow in ``doomed`` kills its worker every time."""
    if escrow_id in doomed:
        die()
    return decode_entries(escrow_id, *args)


def type_or_die(source_id: int, first: int, block: bytes, resume_after: int = 0):
    """The file load's typing, but the block holding line $WORKER_CRASH_LINE kills its worker: every time, or only
    the first time when $WORKER_CRASH_ONCE names a file (created by that first death). The typing workers are
    forked, so they read the environment the test set before the load."""
    line = int(os.environ.get("WORKER_CRASH_LINE") or 0)
    if first <= line <= first + block.count(b"\n", 0, len(block) - 1):
        once = os.environ.get("WORKER_CRASH_ONCE")
        if not once:
            die()
        if not Path(once).exists():
            Path(once).write_text("died once")
            die()
    return prepare_file_block(source_id, first, block, resume_after)

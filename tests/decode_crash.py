"""Decode tasks that kill the decode process running them, for tests/test_poller_decode_workers.py. Module-level
functions, so that a forkserver worker can unpickle them by name."""
from __future__ import annotations

import os
import signal
from pathlib import Path

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

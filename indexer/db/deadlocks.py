"""One transaction tried again when the server cancels it as a deadlock victim.

Two loaders can deadlock when one creates an epoch's partitions while the other's batch reads their parents: each
waits for a lock the other holds, and the server cancels one. The cancelled transaction has been rolled back whole,
so running it again is safe. Inside a caller's transaction nothing is retried: the caller's locks are part of the
cycle, and only the caller can give them up.
"""
from __future__ import annotations

import itertools
import logging
from typing import Callable, TypeVar

import psycopg

log = logging.getLogger(__name__)

ATTEMPTS = 5
T = TypeVar("T")


def retrying_deadlocks(conn: psycopg.Connection, work: Callable[[], T], what: str) -> T:
    """``work()`` (which runs its own transaction on ``conn``), up to ATTEMPTS times while it is a deadlock victim."""
    nested = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    for attempt in itertools.count(1):
        try:
            return work()
        except psycopg.errors.DeadlockDetected:
            if nested or attempt >= ATTEMPTS:
                raise
            log.warning("%s: deadlock with a concurrent loader, trying again (%s of %s)", what, attempt + 1, ATTEMPTS)
    raise AssertionError("unreachable")

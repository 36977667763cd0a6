"""One transaction tried again when the server cancels it as a deadlock victim.

Every stage's transactions take their shared locks in one order (indexer.db.lockorder), but a few waits cannot be
ordered: two loaders creating the same epoch's partitions, or two rules claims each marking the other's epoch after
an escrow moved between them. The server then cancels one transaction; it has been rolled back whole, so running it
again is safe. Inside a caller's transaction nothing is retried: the caller's locks are part of the cycle, and only
the caller can give them up.
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
        except psycopg.errors.DeadlockDetected as exc:
            if nested or attempt >= ATTEMPTS:
                raise
            where = "; ".join(getattr(exc, "__notes__", ()))  # the statement it was in, when the stage names it
            log.warning("%s: cancelled as a deadlock victim%s, trying again (%s of %s)", what,
                        f" ({where})" if where else "", attempt + 1, ATTEMPTS)
    raise AssertionError("unreachable")

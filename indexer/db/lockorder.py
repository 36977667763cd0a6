"""The one order in which the stages take the locks they share, so that two processes never deadlock on them.

Tables: the epoch-partitioned parents first, in the order part.ensure_epochs locks them to create an epoch's
partitions (schema, then name; migrations/versions/0014_partitioned_history.py). A stage that reads or writes them
locks them all when its transaction starts, in that order: a loader making a new epoch's partitions meanwhile then
waits for it (or it for the loader), instead of each holding one parent the other needs next.

Dirty marks: ``replay.dirty_escrow``, then ``rules.dirty_epoch``, then ``rules.dirty_escrow``, each in key order.
It is the replay's order, and every statement that locks a mark follows it:

* a loader's batch (indexer.load.marks): its escrows, then its epochs, as the batch's last writes;
* a replay chunk (indexer.replay.run): its claim of escrows, then _MARK_EPOCHS, then _MARK_ESCROWS, last;
* the replay pass's stale-verification marks (indexer.replay.verifier) and ``indexer replay --all``: escrows only,
  committed before the chunks;
* the rules stage (indexer.rules.run): stale or requested epochs in a transaction of their own; a claim of epochs,
  then their escrow marks (_ESCROWS);
* the archive's purge of an epoch (indexer.archive): escrows, then the epoch, then its escrow marks.

The one mark taken out of order is the rules stage's mark of an epoch an amended escrow moved between
(indexer.rules.run._evaluate): it is found only while a claim is evaluated; two claims that each mark the other's
epoch are a deadlock the server breaks, and the victim's claim is tried again (indexer.db.deadlocks).
"""
from __future__ import annotations

from collections.abc import Iterable

import psycopg

# Every partitioned parent of the indexer's schemas, in part.ensure_epochs' order (its own query)
_PARENTS = """
SELECT n.nspname, c.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('rec', 'replay', 'rules') AND NOT c.relispartition ORDER BY 1, 2
"""


def lock_parents(tables: Iterable[tuple[str, str]]) -> str:
    """``LOCK TABLE ONLY`` statements for (schema.table, lock mode) pairs, in part.ensure_epochs' order. ONLY: the
    partitions themselves are locked as a statement reaches them, always after their parent."""
    return ";".join(f"LOCK TABLE ONLY {table} IN {mode} MODE"
                    for table, mode in sorted(tables, key=lambda t: t[0].split(".")))


def lock_every_parent(conn: psycopg.Connection, written: str) -> str:
    """lock_parents for every partitioned parent there is (read from the catalog: they change only with a
    migration), ROW EXCLUSIVE in the schema ``written`` and ACCESS SHARE elsewhere. Runs its query in a transaction
    of its own when ``conn`` is not in one (a caller's retry needs it idle)."""
    with conn.transaction():
        rows = conn.execute(_PARENTS).fetchall()
    return lock_parents((f"{schema}.{name}", "ROW EXCLUSIVE" if schema == written else "ACCESS SHARE")
                        for schema, name in rows)

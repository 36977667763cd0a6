"""Routing escrow-keyed record rows to their epoch partition (docs/partitioning.md).

The tx and host_stats records carry no epoch; their tables are partitioned by an `epoch_index` the loader fills
from rec.escrow_epoch, the registry of each escrow's partition (-1, the `unassigned` partition, until its escrow
record is loaded). Two rules keep every key in exactly one partition, which is what makes the partitioned unique
index (key + epoch_index) as strong as the old one (key alone):
  - a batch locks the registry rows of the escrows whose txs it writes (FOR SHARE) before it reads their epochs;
  - loading an escrow record updates its registry row (a row lock: it waits for those batches to commit) and then
    moves the escrow's rows from the partition the registry named before.
So a tx batch and its escrow, in any order or concurrently, end with the txs in the escrow's epoch partition.
"""
from __future__ import annotations

import psycopg

from indexer.db.deadlocks import retrying_deadlocks
from indexer.db.quickstats import Deferred, analyze_quickly
from indexer.load.typed import copy_text as text
from indexer.records import KINDS

PARTITIONS_AHEAD = 1  # epochs after the current one whose partitions exist before their first row (each is one
# empty table per partitioned table: the planner of any unfiltered query pays for every one)
UNASSIGNED = -1

# The kinds whose tables gain epoch_index from the registry: every escrow-scoped kind but the escrow itself.
ROUTED = frozenset(name for name, kind in KINDS.items() if kind.scope == "escrow" and name != "escrow")
_ESCROW_EPOCH_AT = 1 + KINDS["escrow"].columns.index("epoch_index")  # in an escrow COPY row (line number first)

_LOCK = """
INSERT INTO rec.escrow_epoch (escrow_id, epoch_index)
SELECT id, coalesce((SELECT epoch_index FROM rec.escrow WHERE escrow_id = id), -1) FROM unnest(%(ids)s::text[]) id
ON CONFLICT (escrow_id) DO NOTHING
RETURNING escrow_id
"""
_READ_LOCKED = "SELECT escrow_id, epoch_index FROM rec.escrow_epoch WHERE escrow_id = ANY(%(ids)s) FOR SHARE"

# The escrows of a batch whose registry epoch changes (first load after their txs, or an amendment), with the
# partition their rows are in now. A registry row made by a concurrent batch after this statement's snapshot is
# not in `before`; that batch found no escrow record, so it routed to -1.
_SYNC = """
WITH want AS (
  SELECT escrow_id, coalesce(epoch_index, -1) AS epoch_index FROM rec.escrow WHERE escrow_id = ANY(%(ids)s)
), before AS (
  SELECT r.escrow_id, r.epoch_index FROM rec.escrow_epoch r JOIN want USING (escrow_id)
), changed AS (
  INSERT INTO rec.escrow_epoch AS r (escrow_id, epoch_index) SELECT escrow_id, epoch_index FROM want
  ON CONFLICT (escrow_id) DO UPDATE SET epoch_index = excluded.epoch_index
  WHERE r.epoch_index <> excluded.epoch_index
  RETURNING r.escrow_id, r.epoch_index, r.xmax = 0 AS inserted
)
SELECT coalesce(b.epoch_index, -1) AS moved_from, c.epoch_index AS moved_to, c.inserted, array_agg(c.escrow_id)
FROM changed c LEFT JOIN before b USING (escrow_id)
-- a registry row this statement inserted had none before it, so no tx of its escrow was written: nothing to move
-- (the usual first load of an escrow; a row a concurrent batch inserted is updated here, not inserted); those
-- escrows are returned as registered (indexer.load.fresh)
WHERE c.inserted OR c.epoch_index <> coalesce(b.epoch_index, -1)
GROUP BY 1, 2, 3
"""


class EpochRouter:
    """One loader's view of the partitions: which epochs have them (cached), and each batch's routing."""

    def __init__(self) -> None:
        self.ready: set[int] = {UNASSIGNED}

    def ensure(self, conn: psycopg.Connection, epochs: set[int]) -> None:
        """Create the partitions of `epochs` that this loader has not seen made (usually made ahead already:
        ensure_ahead). In its own (sub)transaction before the batch: a partition's creation locks its parent only
        briefly. Only the epochs the batch needs: the ones ahead are made after the load (indexer.downstream), off
        the commit path."""
        missing = sorted(e for e in epochs if e not in self.ready)
        if not missing:
            return
        # not tried again here: the caller's batch (BatchLoader.commit, Store.commit) is, this creation included
        _create(conn, "SELECT part.ensure_epochs(%s::bigint[], 0)", missing)
        self.ready.update(missing)

    def forget(self) -> None:
        """After a caller's transaction rolled back: partitions this router made inside it are gone with it (a
        poller's commit makes them in savepoints of its own transaction), so ask the catalog again next time."""
        self.ready = {UNASSIGNED}

    @staticmethod
    def batch_epochs(escrow_copy: bytes) -> set[int]:
        """The epochs named by a batch's escrow rows (their COPY text: few rows, split in C)."""
        return {int(row.split(b"\t", _ESCROW_EPOCH_AT + 1)[_ESCROW_EPOCH_AT])
                for row in escrow_copy.split(b"\n") if row}

    @staticmethod
    def sync(conn: psycopg.Connection, escrow_ids: list[str]) -> tuple[set[str], set[str]]:
        """After a batch's escrow records are written: point their registry rows at their epochs and move the
        rows of the escrows that changed partition. Returns the escrows moved (their rows may have been written
        before their escrow record: indexer.load.slots rechecks them), and the escrows this statement registered
        (no row of theirs existed: indexer.load.fresh)."""
        moved, registered = set(), set()
        for moved_from, moved_to, inserted, ids in conn.execute(_SYNC, {"ids": escrow_ids}).fetchall():
            if inserted:
                registered.update(ids)
                continue
            for kind in sorted(ROUTED):
                # constant epochs: the planner prunes the UPDATE to the one partition the rows are in
                conn.execute(f"UPDATE rec.{KINDS[kind].table} SET epoch_index = %(to)s "
                             "WHERE epoch_index = %(from)s AND escrow_id = ANY(%(ids)s)",
                             {"to": moved_to, "from": moved_from, "ids": ids})
            moved.update(ids)
        return moved, registered

    @staticmethod
    def lock(conn: psycopg.Connection, escrow_ids: list[str]) -> tuple[dict[str, int], set[str]]:
        """Register and share-lock the escrows whose txs the batch writes; returns (escrow_id -> epoch, the escrows
        this call registered: none of their rows existed, indexer.load.fresh)."""
        registered = {row[0] for row in conn.execute(_LOCK, {"ids": escrow_ids}).fetchall()}
        return dict(conn.execute(_READ_LOCKED, {"ids": escrow_ids}).fetchall()), registered

    @staticmethod
    def targets(conn: psycopg.Connection, epochs: dict[str, int]) -> dict[str, str]:
        """Where a batch's rows of each routed kind are written: its epoch's partition itself when every escrow
        of the batch is in one epoch (the usual case; PostgreSQL then neither routes each row nor prunes each
        probe of the conflict check), else the parent. The partitions are looked up, not remembered: an archive
        may have dropped one since (rows of that epoch then go through the parent to the DEFAULT partition)."""
        distinct = set(epochs.values())
        if len(distinct) != 1:
            return {kind: f"rec.{KINDS[kind].table}" for kind in ROUTED}
        return EpochRouter.partitions(conn, distinct)[distinct.pop()]

    @staticmethod
    def partitions(conn: psycopg.Connection, epochs: set[int]) -> dict[int, dict[str, str]]:
        """epoch -> {routed kind: its table's partition of that epoch, or the parent where there is none}."""
        names = {(epoch, kind): f"part.rec_{KINDS[kind].table}_{'unassigned' if epoch < 0 else f'e{epoch}'}"
                 for epoch in epochs for kind in ROUTED}
        found = {row[0] for row in conn.execute("SELECT n FROM unnest(%s::text[]) n WHERE to_regclass(n) IS NOT NULL",
                                                (sorted(set(names.values())),))}
        out: dict[int, dict[str, str]] = {epoch: {} for epoch in epochs}
        for (epoch, kind), name in names.items():
            out[epoch][kind] = name if name in found else f"rec.{KINDS[kind].table}"
        return out

    @staticmethod
    def probe_tables(conn: psycopg.Connection, epochs: dict[str, int]) -> dict[str, dict[str, list[str]]] | None:
        """For a batch spanning several epochs: {routed kind: {table: the escrows whose rows are there}} (their
        epoch's partition: indexer.load.probe.keys_may_exist probes each); None for a one-epoch batch."""
        distinct = set(epochs.values())
        if len(distinct) < 2:
            return None
        tables = EpochRouter.partitions(conn, distinct)
        out: dict[str, dict[str, list[str]]] = {kind: {} for kind in ROUTED}
        for escrow_id, epoch in epochs.items():
            for kind, table in tables[epoch].items():
                out[kind].setdefault(table, []).append(escrow_id)
        return out

    @staticmethod
    def route(copy: bytes, epochs: dict[str, int], spans: list | None = None) -> bytes:
        """Append each COPY row's epoch_index (the column after source_id). One epoch for the whole batch (the
        common case: a file or a poll is mostly one epoch) is one bytes.replace; literal newlines only end rows
        (COPY text escapes them inside values). Several epochs: a replace per escrow where the rows are grouped by
        escrow (``spans``, prepare.KindBatch.escrow_spans), else a look-up per row."""
        distinct = set(epochs.values())
        if len(distinct) == 1:
            return copy.replace(b"\n", b"\t%d\n" % distinct.pop())
        # keyed by the id as the row spells it (COPY-escaped), the escrow id being the cell after the line number
        by_id = {text(escrow_id).encode(): b"\t%d\n" % epoch for escrow_id, epoch in epochs.items()}
        if spans is not None:
            return b"".join(copy[start:end].replace(b"\n", by_id[cell]) for cell, start, end in spans)
        return b"".join(row + by_id[row.split(b"\t", 2)[1]] for row in copy.split(b"\n") if row)


def routed_column(kind: str) -> str:
    """The column list suffix of a routed kind's COPY and INSERT: its rows end with their epoch_index."""
    return ", epoch_index" if kind in ROUTED else ""


def analyze_epochs(conn: psycopg.Connection, parent: str, epochs) -> Deferred:
    """ANALYZE the partitions of `parent` that hold `epochs`, not the parent: the replay and the rules plan one
    epoch at a time against a partition's own statistics, and ANALYZE of the parent samples the whole table and
    then every partition again. With the bulk load's small sample; a partition autovacuum holds is skipped and
    returned (indexer.db.quickstats)."""
    return analyze_quickly(conn, partition_names(conn, [parent], epochs))


# Autovacuum's ANALYZE rule, applied by the loader to the rec epoch partitions it writes (autovacuum's own is off for
# them: migration 0020): a partition with no statistics yet, or whose heap grew by more than a tenth since they were
# taken (the relation's size against the pages its last ANALYZE or VACUUM counted; an amendment writes a new row
# version, so it grows the heap too). Exact, where autovacuum's count of changes since the last ANALYZE is not: a
# load's own inserts can reach the statistics collector after the ANALYZE that followed them.
_NEEDS_ANALYZE = """
SELECT t FROM unnest(%s::text[]) t
JOIN pg_class c ON c.oid = to_regclass(t)
CROSS JOIN LATERAL (SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint AS pages) now
WHERE (now.pages > 0  -- an empty partition has nothing to sample, and no statistics after it either
       AND NOT EXISTS (SELECT 1 FROM pg_stats p WHERE p.schemaname = 'part' AND p.tablename = c.relname))
   OR now.pages > c.relpages + greatest(1, c.relpages / 10)
ORDER BY t
"""


def analyze_written(conn: psycopg.Connection, parents: list[str], epochs) -> Deferred:
    """ANALYZE, with the bulk load's small sample, the partitions of ``parents`` (rec tables) that hold ``epochs``
    and that autovacuum's rule says are due (see above). Autovacuum leaves these partitions' statistics to the
    loader: its ANALYZE of a partition still being filled was overwritten by the load's own and only took the
    load's cores. A settled epoch is analysed at the server's target by indexer.poller.freezing."""
    written = partition_names(conn, parents, epochs) if parents and epochs else []
    due = [t for (t,) in conn.execute(_NEEDS_ANALYZE, (written,))] if written else []
    return analyze_quickly(conn, due)


def partition_names(conn: psycopg.Connection, parents: list[str], epochs) -> list[str]:
    """The existing partitions of each of `parents` (schema.table) that hold the given epochs (-1: the unassigned
    one), as quoted names, in one query; an epoch without its own partition is in its parent's DEFAULT one."""
    wanted, fallback = [], []
    for parent in parents:
        schema, table = parent.split(".")
        for epoch in sorted(epochs):
            wanted.append(f"{schema}_{table}_unassigned" if epoch < 0 else f"{schema}_{table}_e{epoch}")
            fallback.append(f"{schema}_{table}_default")
    rows = conn.execute("SELECT DISTINCT coalesce(to_regclass(format('part.%%I', n)), "
                        "to_regclass(format('part.%%I', d)))::text FROM unnest(%s::text[], %s::text[]) w(n, d)",
                        (wanted, fallback))
    return sorted(name for (name,) in rows if name is not None)


# Every epoch partition (part.<schema>_<table>_e<epoch>, as part.ensure_epochs names them) with its epoch: the one
# reading of the catalog for the jobs that go by epoch (indexer.archive, indexer.poller.freezing)
EPOCH_PARTITIONS = r"""
SELECT c.oid AS relid, c.relname, substring(c.relname FROM '_e([0-9]+)$')::bigint AS epoch_index
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'part' AND c.relkind = 'r' AND c.relispartition AND c.relname ~ '_e[0-9]+$'
"""


def ensure_epochs(conn: psycopg.Connection, epochs: list[int]) -> int:
    """Create the partitions of `epochs` (those missing), in a transaction of their own that is tried again as a
    deadlock victim (another loader creating the same ones). Returns how many were created."""
    return retrying_deadlocks(conn, lambda: _create(conn, "SELECT part.ensure_epochs(%s::bigint[], 0)", epochs),
                              f"partitions of epochs {epochs}")


def ensure_ahead(conn: psycopg.Connection, ahead: int = PARTITIONS_AHEAD) -> int:
    """Create the partitions of the current epoch (the newest in rec.escrow or net.epoch_state) and `ahead` after
    it, so the next epoch's first rows find theirs; one catalog probe per table when they exist. Returns how many
    were created; tried again as a deadlock victim, like ensure_epochs."""
    return retrying_deadlocks(conn, lambda: _create(conn, "SELECT part.ensure_ahead(%s)", ahead),
                              "partitions ahead of the current epoch")


def _create(conn: psycopg.Connection, statement: str, argument) -> int:
    with conn.transaction():
        return conn.execute(statement, (argument,)).fetchone()[0]

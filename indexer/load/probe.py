"""Whether any key of a batch may exist already, asked before the batch is COPYed straight into its table.

A file is cut into blocks that do not respect escrows: the escrow at a block's start usually has rows from the
block before, so "has any of the batch's escrows rows of this kind?" sent nearly every block to the staged path
(COPY into a temp table, a join against the table, INSERT ... SELECT: about twice the server's work). For kinds
keyed by (escrow_id, integer, ...), the worker sends each escrow's lowest and highest second key column, and one
index probe per escrow asks whether a row exists in that range: false means no key of the batch exists, so the
direct COPY is safe; true (a reload, an amendment, a key range overlapping an earlier block) means maybe, and the
staged path decides exactly. Other kinds (the escrow itself, epoch-level records) keep the scope probe.
"""
from __future__ import annotations

from functools import cache

import psycopg

from indexer.records import KINDS, PG_TYPES


def keys_may_exist(conn: psycopg.Connection, kind: str, batch, table: str | None = None,
                   scopes_by_table: dict[str, list] | None = None, only: set | None = None) -> bool:
    """False only when no key of `batch` (a prepare.KindBatch) can be in rec.<kind> yet. ``table``: where the
    batch's rows go, when that is one epoch partition (indexer.load.partitions.EpochRouter.targets): every row of an
    escrow is in the partition its registry row names, the one the batch routes to, so probing that partition is
    exact, and planning a probe of one partition costs a fraction of planning it over the parent's (which is most
    of a probe's ~2 ms). ``scopes_by_table``: a batch spanning several epochs, its escrows by the partition each is
    in (EpochRouter.partitions): one probe a partition, each as cheap as the one-epoch batch's, where one probe of
    the parent would plan, and look each escrow up, in every epoch's partition (~6 ms a probe over ten epochs).
    ``only``: the scopes to ask about (None: all); the caller knows the others' keys are new (indexer.load.fresh),
    and an empty set asks nothing."""
    if scopes_by_table is not None:
        return any(_probe(conn, kind, batch, part, set(scopes) if only is None else only.intersection(scopes))
                   for part, scopes in scopes_by_table.items())
    return _probe(conn, kind, batch, table or f"rec.{KINDS[kind].table}", only)


def _probe(conn: psycopg.Connection, kind: str, batch, table: str, only: set | None) -> bool:
    """keys_may_exist over one table, for the batch's scopes in `only` (None: all of them)."""
    if batch.key_ranges:
        ranges = [(scope, low, high) for scope, (low, high) in batch.key_ranges.items()
                  if only is None or scope in only]
        if not ranges:
            return False
        scopes, lows, highs = zip(*ranges)
        # never prepared: a generic plan for arrays of unknown length may pick a sequential scan
        return conn.execute(_range_probe(kind, table), (list(scopes), list(lows), list(highs)),
                            prepare=False).fetchone()[0]
    scopes = list(batch.scope if only is None else batch.scope & only)
    return bool(scopes) and conn.execute(_scope_probe(kind, table), (scopes,), prepare=False).fetchone()[0]


@cache
def _range_probe(kind: str, table: str) -> str:
    spec = KINDS[kind]
    first, second = spec.key[0], spec.key[1]
    first_type, second_type = PG_TYPES[spec.field(first).type], PG_TYPES[spec.field(second).type]
    return (f"SELECT EXISTS (SELECT 1 FROM unnest(%s::{first_type}[], %s::{second_type}[], %s::{second_type}[]) "
            f"AS b(scope, low, high) WHERE EXISTS (SELECT 1 FROM {table} t "
            f"WHERE t.{first} = b.scope AND t.{second} BETWEEN b.low AND b.high))")


@cache
def _scope_probe(kind: str, table: str) -> str:
    """Whether any of the batch's escrows (or epochs: the key's first column) has rows of this kind already."""
    spec = KINDS[kind]
    column = spec.key[0]
    return (f"SELECT EXISTS (SELECT 1 FROM {table} "
            f"WHERE {column} = ANY(%s::{PG_TYPES[spec.field(column).type]}[]))")

"""One definition, checked against the database it describes: each record kind's fields are its table's columns with
the declared types, the refusal parse's fields are rules.refusal_parse's columns, and the schema stamp's head is
Alembic's head."""
from __future__ import annotations

import pytest

from indexer import refusals
from indexer.db import migrate
from indexer.db.schema import head_revision
from indexer.load.partitions import ROUTED
from indexer.records import KINDS, PG_TYPES


def _columns(conn, schema: str, table: str) -> dict[str, str]:
    rows = conn.execute("""SELECT a.attname, format_type(a.atttypid, a.atttypmod)
                           FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0
                             AND NOT a.attisdropped""", (f"{schema}.{table}",)).fetchall()
    return dict(rows)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_record_kind_matches_its_table(conn, kind):
    spec = KINDS[kind]
    have = _columns(conn, "rec", spec.table)
    assert have, f"rec.{spec.table} missing"
    # the declared types as PostgreSQL spells them: a scratch table with the same column definitions
    conn.execute(f"CREATE TEMP TABLE declared ({', '.join(f'{f.name} {PG_TYPES[f.type]}' for f in spec.fields)})")
    want = _columns(conn, "pg_temp", "declared")
    assert {c: have.get(c) for c in want} == want
    key = conn.execute("""SELECT array_agg(a.attname ORDER BY k.ord) FROM pg_index i
                          CROSS JOIN unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
                          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                          WHERE i.indrelid = to_regclass(%s) AND i.indisprimary""",
                       (f"rec.{spec.table}",)).fetchone()[0]
    # an epoch-partitioned table's key carries the partition key after the record's own (docs/partitioning.md)
    assert tuple(key) == spec.key + (("epoch_index",) if kind in ROUTED else ())


def test_refusal_parse_fields_are_the_table_columns(conn):
    assert set(_columns(conn, "rules", "refusal_parse")) == set(refusals.COLUMNS)


def test_schema_stamp_head_is_alembics_head():
    assert migrate.heads() == [head_revision()]

"""identifiers compare as bytes: every text column an index of the indexer's tables orders or hashes gets
COLLATE "C"

Escrow ids, addresses, model ids and hashes are opaque identifiers; nothing reads them in a language's order. Under
the database's default collation, though, every insert into their indexes compares keys with the locale's rules: on
a server made by a plain `initdb` on a machine whose locale is C.UTF-8 or en_US.UTF-8, 1M inserts into a
(text, bigint) primary key took 2.9-3.7 s against 2.1-2.4 s with COLLATE "C" (stock PostgreSQL 15, measured
before this migration). With "C" they compare with memcmp, and their order is the byte order Python's sort gives
(indexer/replay/reads.py relies on it). Equality is unchanged, since every collation involved is deterministic;
a column left at the default collation meets a "C" one in a join or a comparison without conflict (the non-default
collation wins), so columns no index reads keep theirs.

ALTER COLUMN ... TYPE rebuilds the tables' indexes (on a large database this takes minutes, once) and is refused
while a view uses the column: our api/fn views are dropped first and re-created by `indexer migrate` right after
(indexer.db.migrate.apply_replaceable_objects); a view of a user's on them stops the migration, named
(indexer.db.replaceable.DependentObjectsError). Downgrade puts the default collation back on the same columns.

Revision ID: 0049_identifier_collation
Revises: 0047_prefix_chain_comment
Create Date: 2026-12-05
"""
from alembic import op

revision = "0049_identifier_collation"
down_revision = "0047_prefix_chain_comment"
branch_labels = None
depends_on = None

SCHEMAS = ("rec", "replay", "rules", "chain", "part", "net", "alert")

# Text columns of the indexer's tables (partitions follow their parent) that some index reads: a key column (of a
# constraint's index too: those depend on the constraint, not on the columns, in pg_depend), or one an index
# expression or predicate reads (pg_depend records each). `collation`: the one they have now.
_INDEXED_TEXT = """
SELECT c.oid::regclass::text, quote_ident(a.attname), format_type(a.atttypid, a.atttypmod)
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = ANY(%(schemas)s::regnamespace[]) AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND a.atttypid IN ('text'::regtype, 'varchar'::regtype, 'bpchar'::regtype)
  AND a.attcollation = (SELECT oid FROM pg_collation WHERE collname = %(collation)s AND collnamespace =
                                                           'pg_catalog'::regnamespace)
  AND a.attgenerated = '' AND NOT EXISTS (  -- PostgreSQL cannot alter a generated column or one it reads
        SELECT 1 FROM pg_depend g JOIN pg_attrdef ad ON ad.oid = g.objid
        JOIN pg_attribute ga ON ga.attrelid = ad.adrelid AND ga.attnum = ad.adnum AND ga.attgenerated <> ''
        WHERE g.classid = 'pg_attrdef'::regclass AND g.refclassid = 'pg_class'::regclass AND g.refobjid = c.oid
          AND g.refobjsubid = a.attnum)
  AND (EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND a.attnum = ANY(x.indkey::int2[]))
       OR EXISTS (SELECT 1 FROM pg_depend d JOIN pg_class i ON i.oid = d.objid AND i.relkind IN ('i', 'I')
                  WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
                    AND d.refobjid = c.oid AND d.refobjsubid = a.attnum))
ORDER BY 1, 2
"""


def _recollate(current: str, target: str) -> None:
    from indexer.db import replaceable
    from indexer.db.schema import replaceable_object_files

    conn = op.get_bind()
    rows = conn.exec_driver_sql(_INDEXED_TEXT, {"schemas": list(SCHEMAS), "collation": current}).fetchall()
    if not rows:
        return
    replaceable.remove_our_views(conn, replaceable_object_files())  # `indexer migrate` re-creates them at the end
    by_table: dict[str, list[str]] = {}
    for table, column, type_name in rows:
        by_table.setdefault(table, []).append(f'ALTER COLUMN {column} TYPE {type_name} COLLATE "{target}"')
    for table, clauses in by_table.items():  # one ALTER a table: its indexes are rebuilt once
        op.execute(f"ALTER TABLE {table} {', '.join(clauses)}")


def upgrade() -> None:
    _recollate("default", "C")


def downgrade() -> None:
    _recollate("C", "default")

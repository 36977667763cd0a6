"""Identifiers compare as bytes (migration 0049): every text column an index of the indexer's tables reads is
COLLATE "C", whatever the database's default collation, and the migration re-creates the views it must drop."""
from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import create_engine

from indexer.db import migrate, replaceable
from indexer.db.scratch import scratch_database
from indexer.db.url import sqlalchemy_url

BEFORE = "0047_prefix_chain_comment"
SCHEMAS = ["rec", "replay", "rules", "chain", "part", "net", "alert"]
# Every text column an index of the indexer's reads: a key column (constraint indexes included), or one an
# expression or predicate reads. net.cursor's are left out: PostgreSQL cannot alter a column its generated columns read.
INDEXED_TEXT = """
SELECT c.oid::regclass::text, a.attname, coalesce(k.collname, '-')
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_collation k ON k.oid = a.attcollation
WHERE c.relnamespace = ANY(%s::regnamespace[]) AND c.relkind IN ('r', 'p') AND a.atttypid = 'text'::regtype
  AND c.oid <> 'net.cursor'::regclass
  AND (EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND a.attnum = ANY(x.indkey::int2[]))
       OR EXISTS (SELECT 1 FROM pg_depend d JOIN pg_class i ON i.oid = d.objid AND i.relkind IN ('i', 'I')
                  WHERE d.classid = 'pg_class'::regclass AND d.refobjid = c.oid AND d.refobjsubid = a.attnum))
ORDER BY 1, 2"""


def _indexed_text(url: str) -> list[tuple]:
    with psycopg.connect(url) as c:
        return c.execute(INDEXED_TEXT, (SCHEMAS,)).fetchall()


def _apply_views(url: str) -> None:
    """Today's api views and fn functions, those the schema at BEFORE can hold: an object that reads a column added
    by a later migration is left out (the migration under test drops and re-creates whatever is there)."""
    from sqlalchemy.exc import DBAPIError

    from indexer.db.schema import replaceable_object_files

    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as conn:
            for schema in ("fn", "api"):
                conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            for st in replaceable.statements(replaceable_object_files()):
                try:
                    with conn.begin_nested():
                        conn.exec_driver_sql(st.text)
                except DBAPIError:
                    continue
    finally:
        engine.dispose()


def test_every_indexed_text_column_compares_bytes_and_new_partitions_inherit_it(db_url):
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("SELECT part.ensure_epochs(ARRAY[7123]::bigint[], 0)")
    rows = _indexed_text(db_url)
    assert ("rec.start_tx", "escrow_id", "C") in rows and ("part.rec_start_tx_e7123", "escrow_id", "C") in rows
    # primary-key columns too (their index depends on the constraint, not on the column)
    assert ("rec.confirm_start_tx", "escrow_id", "C") in rows and ("replay.inference", "escrow_id", "C") in rows
    assert [r for r in rows if r[2] != "C"] == []


@pytest.fixture
def utf8_db_url(pg_admin_url):
    """An empty database whose default collation is a libc locale, as a plain initdb on most machines makes it."""
    with psycopg.connect(pg_admin_url) as c:
        if not c.execute("SELECT 1 FROM pg_collation WHERE collname IN ('C.utf8', 'C.UTF-8')").fetchone():
            pytest.skip("the server knows no C.UTF-8 locale")
    with scratch_database(pg_admin_url, "indexer_utf8", locale="C.UTF-8") as url:
        yield url


def test_a_database_under_a_locale_is_migrated_with_its_views_and_rows(utf8_db_url):
    migrate.upgrade(utf8_db_url, BEFORE)
    _apply_views(utf8_db_url)
    with psycopg.connect(utf8_db_url, autocommit=True) as c:
        assert c.execute("SELECT datcollate FROM pg_database WHERE datname = current_database()").fetchone()[0] \
            == "C.UTF-8"
    assert {r[2] for r in _indexed_text(utf8_db_url)} == {"default"}

    migrate.upgrade(utf8_db_url)
    assert {r[2] for r in _indexed_text(utf8_db_url)} == {"C"}
    with psycopg.connect(utf8_db_url) as c:
        assert c.execute("SELECT count(*) FROM api.inferences").fetchone()[0] == 0  # re-created and readable

    migrate.downgrade(utf8_db_url, BEFORE)
    assert {r[2] for r in _indexed_text(utf8_db_url)} == {"default"}


def test_a_users_view_on_an_api_view_stops_the_migration_named(utf8_db_url):
    migrate.upgrade(utf8_db_url, BEFORE)
    _apply_views(utf8_db_url)
    with psycopg.connect(utf8_db_url, autocommit=True) as c:
        c.execute("CREATE VIEW public.my_inferences AS SELECT * FROM api.inferences")
    with pytest.raises(replaceable.DependentObjectsError, match="my_inferences"):
        migrate.upgrade(utf8_db_url)
    assert migrate.current_revision(utf8_db_url) == BEFORE  # one transaction: nothing half done
    with psycopg.connect(utf8_db_url, autocommit=True) as c:
        c.execute("DROP VIEW public.my_inferences")
    migrate.upgrade(utf8_db_url)
    assert {r[2] for r in _indexed_text(utf8_db_url)} == {"C"}

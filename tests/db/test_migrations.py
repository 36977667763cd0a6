"""Alembic migrations, the replaceable api objects and the read-only role, on real PostgreSQL."""
from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from indexer.db import migrate

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ("rec", "replay", "rules", "api")


def _catalog(url: str) -> dict:
    """What the schema consists of: tables and columns, views and their definitions, functions, api grants."""
    with psycopg.connect(url) as c:
        columns = c.execute(
            "SELECT table_schema, table_name, column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = ANY(%s) ORDER BY 1, 2, 3", (list(SCHEMAS),)
        ).fetchall()
        views = c.execute("SELECT schemaname, viewname, definition FROM pg_views WHERE schemaname = ANY(%s) "
                          "ORDER BY 1, 2", (list(SCHEMAS),)).fetchall()
        functions = c.execute("SELECT n.nspname, p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
                              "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = ANY(%s) "
                              "ORDER BY 1, 2", (list(SCHEMAS),)).fetchall()
        constraints = c.execute("SELECT n.nspname, conname, pg_get_constraintdef(k.oid) FROM pg_constraint k "
                                "JOIN pg_namespace n ON n.oid = k.connamespace WHERE n.nspname = ANY(%s) "
                                "ORDER BY 1, 2", (list(SCHEMAS),)).fetchall()
        grants = c.execute("SELECT table_schema, table_name, privilege_type FROM information_schema.role_table_grants "
                           "WHERE grantee = 'indexer_reader' ORDER BY 1, 2, 3").fetchall()
        version = c.execute("SELECT version_num FROM alembic_version").fetchall()
    return {"columns": columns, "views": views, "functions": functions, "constraints": constraints,
            "grants": grants, "version": version}


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url) as c:
        return {r[0] for r in c.execute("SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)",
                                        (list(SCHEMAS),))}


def test_single_alembic_head():
    assert len(migrate.heads()) == 1


def test_upgrade_downgrade_upgrade_round_trip(empty_db_url):
    assert migrate.current_revision(empty_db_url) is None
    migrate.upgrade(empty_db_url)
    assert migrate.current_revision(empty_db_url) == migrate.heads()[0]
    assert _schemas(empty_db_url) == set(SCHEMAS)
    first = _catalog(empty_db_url)
    assert ("api", "inferences") in {(s, v) for s, v, _ in first["views"]}
    assert ("rec", "finish_tx", "output_tokens", "bigint", "YES", None) in first["columns"]

    migrate.downgrade(empty_db_url)
    assert migrate.current_revision(empty_db_url) is None
    assert _schemas(empty_db_url) == set()

    migrate.upgrade(empty_db_url)
    assert migrate.current_revision(empty_db_url) == migrate.heads()[0]
    assert _catalog(empty_db_url) == first


def _cli(*args):
    env = {**os.environ}
    env.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "indexer", *args], cwd=ROOT, env=env, capture_output=True,
                          timeout=120)


def test_cli_migrate_twice_is_a_no_op(empty_db_url):
    res = _cli("--database-url", empty_db_url, "migrate")
    assert res.returncode == 0, res.stderr.decode()
    assert migrate.current_revision(empty_db_url) == migrate.heads()[0]
    before = _catalog(empty_db_url)
    with psycopg.connect(empty_db_url) as c:
        c.execute("INSERT INTO rec.source (digest, uri) VALUES ('d', 'kept.ndjson')")
    res = _cli("--database-url", empty_db_url, "migrate")
    assert res.returncode == 0, res.stderr.decode()
    assert _catalog(empty_db_url) == before
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT uri FROM rec.source").fetchall() == [("kept.ndjson",)]


def test_reader_role_exists_and_a_second_database_migrates_with_it_present(conn, empty_db_url):
    # The template database of this session already created the cluster-wide role; migrating another
    # database on the same server must cope with it existing. (Whether it may log in is the server's business: the
    # migrations create it NOLOGIN, the embedded cluster gives it a password.)
    assert conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'indexer_reader'").fetchone() == (1,)
    migrate.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT has_schema_privilege('indexer_reader', 'api', 'USAGE'), "
                         "has_table_privilege('indexer_reader', 'api.inferences', 'SELECT')").fetchone() == \
            (True, True)


def test_reader_role_selects_api_and_nothing_else(db_url):
    with psycopg.connect(db_url, autocommit=True) as c:
        views = [r[0] for r in c.execute("SELECT viewname FROM pg_views WHERE schemaname = 'api' ORDER BY 1")]
        assert "inferences" in views
        c.execute("SET ROLE indexer_reader")
        for view in views:
            c.execute(f"SELECT * FROM api.{view} LIMIT 1").fetchall()
        for table in ("rec.finish_tx", "replay.inference", "rules.dirty_epoch", "public.alembic_version"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(f"SELECT * FROM {table} LIMIT 1")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("CREATE TABLE api.sneaky (x int)")
        # the analysts' chain-math functions are callable (interface.md §3: schema fn, executable by the reader)
        assert c.execute("SELECT round(fn.sprt_llr(25, 263, 0.05, 0.10), 2), fn.missed_stat_test(0, 100, 0.10)"
                         ).fetchone() == (Decimal("4.46"), True)
        c.execute("RESET ROLE")
        grants = c.execute("SELECT DISTINCT table_schema, privilege_type FROM information_schema.role_table_grants "
                           "WHERE grantee = 'indexer_reader'").fetchall()
        assert grants == [("api", "SELECT")]
        assert len(c.execute("SELECT DISTINCT table_name FROM information_schema.role_table_grants "
                             "WHERE grantee = 'indexer_reader'").fetchall()) == len(views)

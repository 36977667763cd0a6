"""Is the database's schema the one this code expects? One query, no Alembic import (Alembic costs ~0.5 s to import;
commands with nothing to do must return fast).

`indexer migrate` stamps schema ``api`` with a comment naming the Alembic head and a digest of the replaceable
objects (sql/functions, sql/views) and the views' comments (sql/views/api_comments.toml) it applied. A command
compares that stamp with the code's and migrates only when they differ, so new views, functions or comments shipped
without a new migration are applied too.
"""
from __future__ import annotations

import hashlib
from functools import cache

import psycopg

from indexer.db.paths import MIGRATIONS_DIR, SQL_DIR

_STAMP_QUERY = "SELECT obj_description(to_regnamespace('api')::oid, 'pg_namespace')"


def replaceable_object_files() -> list:
    """Functions first, then views; each group in file-name order (numeric prefixes set dependencies)."""
    return sorted(SQL_DIR.glob("functions/*.sql")) + sorted(SQL_DIR.glob("views/*.sql"))


@cache
def head_revision() -> str:
    """The newest migration's revision id (file stems are the revision ids; tests/db/test_migrations checks that this
    equals Alembic's own head)."""
    return sorted(p.stem for p in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"))[-1]


@cache
def expected_stamp() -> str:
    digest = hashlib.sha256()
    for path in replaceable_object_files() + [SQL_DIR / "views" / "api_comments.toml"]:  # indexer.db.comments
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"indexer schema {head_revision()} objects {digest.hexdigest()[:16]}"


def current_stamp(conn: psycopg.Connection) -> str | None:
    return conn.execute(_STAMP_QUERY).fetchone()[0]

"""`indexer migrate`: Alembic to head, then the replaceable objects in sql/ (api views, functions), then the
read-only role. All in one transaction under an advisory lock, so it is idempotent and safe to run twice at once."""
from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg

from indexer.db.paths import MIGRATIONS_DIR
from indexer.db.roles import READER_ROLE
from indexer.db.schema import current_stamp, expected_stamp, replaceable_object_files
from indexer.db.url import sqlalchemy_url

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection

_LOCK_KEY = 0x6465767368617264  # 'devshard'


def ensure_schema(url: str) -> bool:
    """Migrate when the database's schema stamp differs from this code's; True when it migrated. The check is one
    query; Alembic and SQLAlchemy (about 0.5 s to import) are loaded only when there is something to migrate."""
    with psycopg.connect(url, autocommit=True) as conn:
        if current_stamp(conn) == expected_stamp():
            return False
    upgrade(url)
    return True


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def heads() -> list[str]:
    from alembic.script import ScriptDirectory

    return list(ScriptDirectory.from_config(alembic_config()).get_heads())


def apply_replaceable_objects(conn: Connection) -> None:
    """fn: SQL functions the rules use; api: the public views, with their comments. Replaced in place (indexer.db.replaceable), never
    by dropping the schemas: views that users built on top of api survive."""
    from indexer.db import comments, replaceable

    replaceable.apply(conn, replaceable_object_files())
    comments.apply(conn)  # after every (re)creation: a view created again has lost its comments
    ensure_reader_role(conn)
    conn.exec_driver_sql(f"COMMENT ON SCHEMA api IS '{expected_stamp()}'")  # what db.schema.ensure_schema checks


def ensure_reader_role(conn: Connection) -> None:
    # Roles are cluster-wide: another database on the same server may have created it already.
    conn.exec_driver_sql(f"""
        DO $$ BEGIN CREATE ROLE {READER_ROLE} NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$""")
    conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA api TO {READER_ROLE}")
    conn.exec_driver_sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA api TO {READER_ROLE}")
    # the analysts' functions (chain math, limits): pure computations, they read no table
    conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA fn TO {READER_ROLE}")
    conn.exec_driver_sql(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA fn TO {READER_ROLE}")


def drop_replaceable_objects(conn: Connection) -> None:
    """Our views and functions, then schemas api and fn, each without CASCADE: a user's object in the way stops the
    downgrade with its name instead of vanishing."""
    from indexer.db import replaceable

    replaceable.remove_ours(conn, files=replaceable_object_files())
    for schema in ("api", "fn"):
        try:
            with conn.begin_nested():
                conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema}")
        except Exception as exc:  # noqa: BLE001 - only the dependent-objects refusal is reworded
            if getattr(getattr(exc, "orig", None), "sqlstate", None) != "2BP01":
                raise
            raise replaceable.DependentObjectsError(
                f"schema {schema} still holds objects that are not the indexer's: "
                f"{exc.orig.diag.message_detail or exc.orig}. Move or drop them, then downgrade again.") from None


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command
    from sqlalchemy import create_engine, text

    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            command.upgrade(alembic_config(conn), revision)
            if revision == "head":
                apply_replaceable_objects(conn)
    finally:
        engine.dispose()


def downgrade(url: str, revision: str = "base") -> None:
    from alembic import command
    from sqlalchemy import create_engine, text

    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            drop_replaceable_objects(conn)  # views depend on the tables
            command.downgrade(alembic_config(conn), revision)
    finally:
        engine.dispose()


def current_revision(url: str) -> str | None:
    from sqlalchemy import create_engine

    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            exists = conn.exec_driver_sql("SELECT to_regclass('public.alembic_version')").scalar()
            if not exists:
                return None
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    finally:
        engine.dispose()

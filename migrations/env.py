"""Alembic environment. The connection is passed in by indexer.db.migrate (config.attributes['connection'])
or built from sqlalchemy.url; replaceable objects (views, functions in sql/) are re-applied after upgrades."""
from alembic import context
from sqlalchemy import create_engine

from indexer.db.meta import metadata

config = context.config


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        _run(conn)


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, transaction_per_migration=False)
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()

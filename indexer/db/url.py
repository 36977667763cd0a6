"""Which database a command talks to: --database-url, then DATABASE_URL, then the embedded cluster."""
from __future__ import annotations

import os


def resolve_database_url(explicit: str | None = None) -> str:
    url = explicit or os.environ.get("DATABASE_URL")
    if url:
        return libpq_url(url)
    from indexer.db.embedded import EmbeddedCluster

    return EmbeddedCluster().url()


def libpq_url(url: str) -> str:
    """psycopg wants plain postgresql:// ; accept SQLAlchemy-style dialect prefixes too."""
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix):]
    return url


def sqlalchemy_url(url: str) -> str:
    return "postgresql+psycopg://" + libpq_url(url)[len("postgresql://"):]


def redact(url: str) -> str:
    """Never print credentials."""
    from sqlalchemy.engine import make_url

    return make_url(sqlalchemy_url(url)).render_as_string(hide_password=True)

"""Which database a command talks to: --database-url, then DATABASE_URL, then the embedded cluster."""
from __future__ import annotations

from indexer.settings import Settings, check_database_url


def resolve_database_url(explicit: str | None = None, settings: Settings | None = None) -> str:
    """--database-url (``explicit``) wins over DATABASE_URL (checked by Settings); with neither, the embedded
    cluster under INDEXER_HOME (started if needed). ``settings`` defaults to the environment's."""
    if explicit is not None:
        return libpq_url(check_database_url(explicit, "--database-url"))
    settings = settings or Settings.from_env()
    if settings.database_url:
        return libpq_url(settings.database_url)
    from indexer.db.embedded import EmbeddedCluster

    return EmbeddedCluster(settings.indexer_home).url()


def libpq_url(url: str) -> str:
    """psycopg wants plain postgresql:// ; accept SQLAlchemy-style dialect prefixes too."""
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix):]
    return url


def sqlalchemy_url(url: str) -> str:
    return "postgresql+psycopg://" + libpq_url(url)[len("postgresql://"):]


def redact(url: str) -> str:
    """The URL with any password replaced by ***, for printing."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))

"""Which database a command talks to: --database-url, then DATABASE_URL, then the embedded cluster."""
from __future__ import annotations

from typing import Callable

from indexer.settings import Settings, check_database_url


def resolve_database_url(explicit: str | None = None, settings: Settings | None = None) -> str:
    """--database-url (``explicit``) wins over DATABASE_URL (checked by Settings); with neither, the embedded
    cluster under INDEXER_HOME (started if needed). ``settings`` defaults to the environment's."""
    if explicit is not None:
        return remember(libpq_url(check_database_url(explicit, "--database-url")))
    settings = settings or Settings.from_env()
    if settings.database_url:
        return remember(libpq_url(settings.database_url))
    from indexer.db.embedded import EmbeddedCluster

    return remember(EmbeddedCluster(settings.indexer_home).url())


def embedded_finder(explicit: str | None = None, settings: Settings | None = None) -> Callable[[], str | None] | None:
    """For a long-running command whose URL came from the embedded cluster: a callable returning the cluster's URL
    while it runs (None while it is stopped; it is not started), so the command finds the server again after
    `indexer db stop` and a restart, even on another port. None when the URL was given (--database-url,
    DATABASE_URL): a server we did not start is not looked for elsewhere."""
    settings = settings or Settings.from_env()
    if explicit is not None or settings.database_url:
        return None
    from indexer.db.embedded import EmbeddedCluster

    return EmbeddedCluster(settings.indexer_home).running_url


def is_unreachable(exc: BaseException) -> bool:
    """True when `exc` says the database cannot be reached (refused, closed, shutting down or starting up), as
    opposed to a statement that failed: SQLSTATE class 08, 57P01-57P03, or a connection error without a state."""
    import psycopg

    for e in (exc, exc.__cause__, getattr(exc, "orig", None)):
        if isinstance(e, psycopg.OperationalError):
            state = e.sqlstate
            if state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03"):
                return True
    return False


# Passwords of the database URLs in use. libpq quotes a URL it cannot parse whole in its error ('invalid percent-
# encoded token: "pa%zzss"', '... in URI: "postgresql://u:pw@[::1/db"'), so a message about the database can carry
# the password in a form no URL pattern finds: every message about it goes through scrub().
_SECRETS: set[str] = set()
SECRET_MIN = 4  # shorter "passwords" are not searched for: replacing them would garble every message


def remember(url: str) -> str:
    """Note the password of ``url`` (the userinfo's and any ``password=`` parameter's, as written and
    percent-decoded) for :func:`scrub`; returns ``url``. Parsed by hand: the URL may be one urlsplit refuses."""
    import re
    from urllib.parse import unquote

    authority = re.split(r"[/?#]", url.split("://", 1)[1], maxsplit=1)[0] if "://" in url else ""
    userinfo = authority.rpartition("@")[0]
    found = [userinfo.partition(":")[2]] + re.findall(r"(?i)(?:^|[?&])password=([^&#]*)", url)
    for secret in found:
        _SECRETS.update(s for s in (secret, unquote(secret)) if len(s) >= SECRET_MIN)
    return url


def scrub(text: str) -> str:
    """``text`` with every remembered database password replaced by ***."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def first_line(exc: BaseException) -> str:
    """The first line of an error about the database, any password of a URL in use removed."""
    return scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0])


def libpq_url(url: str) -> str:
    """psycopg wants plain postgresql:// ; accept SQLAlchemy-style dialect prefixes too."""
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix):]
    return url


def sqlalchemy_url(url: str) -> str:
    return "postgresql+psycopg://" + libpq_url(url)[len("postgresql://"):]


def redact(url: str) -> str:
    """The URL with any password replaced by ***, for printing: the userinfo's and a ``password=`` query
    parameter's (libpq takes either). The host part is kept as written: libpq's several hosts
    (``h1:5432,h2:5433``) are no port urlsplit can read. A URL that cannot be split at all is not shown."""
    import re
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:  # unmatched IPv6 brackets: refused as configuration before any message shows it
        return "(a database URL that cannot be parsed)"
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if ":" in userinfo:
        parts = parts._replace(netloc=f"{userinfo.split(':', 1)[0]}:***@{hosts}")
    return urlunsplit(parts._replace(query=query))

"""Throwaway databases on a server (tests, benchmarks): created empty or from a template, dropped afterwards."""
from __future__ import annotations

import re
import uuid
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


@contextmanager
def scratch_database(server_url: str, prefix: str, *, template: str | None = None, keep: bool = False,
                     locale: str | None = None):
    """Yield the URL of a new database `<prefix>_<random>` on the server of `server_url` (`locale`: its default
    collation and ctype, from template0)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    clause = f' TEMPLATE "{template}"' if template else ""
    if locale is not None:
        if not re.fullmatch(r"[A-Za-z0-9_.@-]+", locale):
            raise ValueError(f"scratch database: not a locale name: {locale!r}")
        clause = f" LOCALE '{locale}' TEMPLATE template0"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{clause}')
    try:
        yield with_database(server_url, name)
    finally:
        if not keep:
            with psycopg.connect(server_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

"""A throwaway stock PostgreSQL server for benchmarks: initdb in a temp dir, default settings, started with pg_ctl,
stopped and deleted afterwards.

Only where it listens is set: a Unix socket in the private temp dir (mode 0700) and no TCP, so with trust
authentication nobody but its owner (and root) can connect, and nothing about its performance settings differs from
a fresh `initdb`, whose locale (and so the databases' default collation) is the environment's, as on any machine
where a plain `initdb` or a distribution's cluster tool makes the server. Run as root, the server runs as the embedded cluster's system user (PostgreSQL refuses root).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import psycopg

DEFAULT_BINDIR = Path("/usr/lib/postgresql/15/bin")


class StockServerMissing(RuntimeError):
    """No PostgreSQL binaries where asked: the caller skips that server."""


def _server_user() -> dict:
    """subprocess keyword arguments that run the server as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return {}
    from indexer.db.embedded_system import server_ids

    uid, gid = server_ids()  # the embedded cluster's system user, created (by absolute path) if missing
    return {"user": uid, "group": gid}


def _run(args: list[str], as_user: dict, what: str) -> None:
    res = subprocess.run(args, capture_output=True, text=True, cwd="/", **as_user)
    if res.returncode != 0:
        raise RuntimeError(f"{what} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")


@contextmanager
def stock_postgres(bindir: Path = DEFAULT_BINDIR):
    """Yield (server URL, version text) of a fresh server from `bindir`; StockServerMissing when it has no
    initdb/pg_ctl."""
    initdb, pg_ctl = bindir / "initdb", bindir / "pg_ctl"
    if not (initdb.is_file() and pg_ctl.is_file()):
        raise StockServerMissing(f"no initdb/pg_ctl in {bindir}")
    as_user = _server_user()
    home = Path(tempfile.mkdtemp(prefix="stock-pg-bench-"))  # mode 0700: the socket inside is private
    data = home / "data"
    try:
        if as_user:
            os.chown(home, as_user["user"], as_user["group"])
        _run([str(initdb), "-D", str(data), "-U", "postgres", "--auth=trust"], as_user, f"{initdb}")
        port = 5432 + (os.getpid() % 20000)  # only names the socket file, in our own directory
        _run([str(pg_ctl), "-D", str(data), "-w", "-t", "60", "-l", str(home / "server.log"),
              "-o", f"-c listen_addresses='' -c unix_socket_directories='{home}' -p {port}", "start"],
             as_user, f"{pg_ctl} start")
        try:
            version = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True,
                                     text=True).stdout.strip()
            url = f"postgresql://postgres@/postgres?host={home}&port={port}"
            with psycopg.connect(url) as conn:
                collation = conn.execute("SELECT datcollate FROM pg_database WHERE datname = 'postgres'").fetchone()[0]
            yield url, f"{version}, default collation {collation}"
        finally:
            _run([str(pg_ctl), "-D", str(data), "-m", "fast", "-w", "stop"], as_user, f"{pg_ctl} stop")
    finally:
        shutil.rmtree(home, ignore_errors=True)

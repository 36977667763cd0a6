"""The embedded server works wherever a checkout lies and whatever the user's shell sets: a data directory deeper
than a Unix socket path may be (107 bytes), a path with a space and non-ASCII characters, and libpq's variables
(PGHOSTADDR, PGSSLMODE, PGOPTIONS, …) meant for the user's other servers."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from indexer.db.embedded import EmbeddedCluster, EmbeddedError
from indexer.settings import drop_libpq_variables

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def reachable():
    """A temporary directory the server user can pass through when root starts the server (as /var/lib is)."""
    path = Path(tempfile.mkdtemp(prefix="indexer-paths-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _cluster(base: Path) -> EmbeddedCluster:
    """A cluster whose data directory lies under `base`: INDEXER_HOME itself for a user, the system directory for
    root (whose clusters live there)."""
    if os.geteuid() == 0:
        return EmbeddedCluster(base / "home", system_dir=base / "system")
    return EmbeddedCluster(base / "home")


@pytest.mark.parametrize("name", ["d" * 120, "with space/ünïcödé"])
def test_the_server_starts_under_a_long_or_unusual_path(reachable, name):
    base = reachable / name
    base.mkdir(parents=True)
    for p in [base, *base.parents]:
        if p == reachable:
            break
        p.chmod(0o711)
    cluster = _cluster(base)
    assert str(cluster.pgdata).startswith(str(base))
    if name.startswith("d"):  # a socket in the data directory would pass the limit
        assert len(os.fsencode(cluster.pgdata / ".s.PGSQL.65535")) > 107
    try:
        with psycopg.connect(cluster.url()) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("indexer",)
        assert not list(cluster.pgdata.glob(".s.PGSQL.*"))  # TCP only
    finally:
        cluster.destroy()


def test_a_path_the_shell_would_read_is_refused_naming_it(reachable):
    """pg_ctl starts the server through /bin/sh: a `$` or a backquote in a path would run something else."""
    base = reachable / "x$HOME`id`"
    base.mkdir()
    base.chmod(0o711)
    cluster = _cluster(base)
    try:
        with pytest.raises(EmbeddedError, match=r"cannot run from .*x\$HOME`id`.*would read the '\$', '`' in it"):
            cluster.url()
        assert not (cluster.pgdata / "PG_VERSION").exists()
    finally:
        cluster.destroy()


# each would stop or misdirect a connection to the embedded server if libpq applied it
LIBPQ_ENVIRONMENT = {
    "PGHOSTADDR": "127.0.0.2",  # another address: the server listens on 127.0.0.1 only
    "PGSSLMODE": "require",
    "PGOPTIONS": "-c default_transaction_read_only=on",
    "PGTARGETSESSIONATTRS": "standby",
    "PGSERVICE": "no-such-service",
    "PGCLIENTENCODING": "LATIN1",
    "PGDATESTYLE": "SQL, DMY",
    "PGHOST": "/nonexistent", "PGPORT": "1", "PGUSER": "nobody", "PGPASSWORD": "wrong", "PGDATABASE": "nope",
}


def test_libpq_variables_do_not_reach_the_embedded_server(reachable):
    home = reachable / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)} | LIBPQ_ENVIRONMENT
    env["INDEXER_HOME"] = str(home)
    try:
        for args in (["migrate"], ["db", "url"]):  # migrate writes: a read-only session would fail it
            res = subprocess.run([sys.executable, "-m", "indexer", *args], cwd=reachable, env=env,
                                 capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stderr[-2000:]
        with psycopg.connect(res.stdout.strip()) as conn:  # the URL is the embedded server's
            assert conn.execute("SELECT count(*) > 0 FROM pg_views WHERE schemaname = 'api'").fetchone() == (True,)
    finally:
        EmbeddedCluster(home).destroy()


def test_only_libpq_variables_are_dropped():
    env = {"PGHOST": "db", "PGSSLNEGOTIATION": "direct", "DATABASE_URL": "postgresql://x/y", "HOME": "/root"}
    assert drop_libpq_variables(env) == ["PGHOST", "PGSSLNEGOTIATION"]
    assert env == {"DATABASE_URL": "postgresql://x/y", "HOME": "/root"}

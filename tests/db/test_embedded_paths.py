"""The embedded server starts wherever a checkout lies: a data directory deeper than a Unix socket path may be (107
bytes), and a path with a space and non-ASCII characters."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from indexer.db.embedded import EmbeddedCluster


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

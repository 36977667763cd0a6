"""Issue 9 items 6 and 7: the embedded cluster authenticates with a generated password (scram, kept owner-only in
INDEXER_HOME), `indexer db url` prints a URL that works, an older trust cluster is upgraded in place, the server log
is owner-only, and no directory above INDEXER_HOME is opened to other users. Issue 35 item 1 (root's layout under
/var/lib, a checkout in a private directory) is in test_embedded_first_run.py."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from indexer.db.embedded import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home():
    path = Path(tempfile.mkdtemp(prefix="indexer-emb-"))
    yield path
    EmbeddedCluster(path).destroy()


def _cli(home: Path, *args):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {"INDEXER_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "indexer", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}"))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_password_auth_a_working_url_and_owner_only_files(home):
    res = _cli(home, "db", "url")
    assert res.returncode == 0, res.stderr
    url = res.stdout.strip()
    password = (home / "password").read_text().strip()
    assert len(password) >= 24 and urlsplit(url).password == password
    with psycopg.connect(url) as conn:  # what psql "$(indexer db url)" gets
        assert conn.execute("SELECT current_database()").fetchone() == ("indexer",)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(_without_password(url), connect_timeout=5)
    assert _mode(home / "password") == 0o600
    assert _mode(home / "postgres.log") == 0o600
    hba = EmbeddedCluster(home).pgdata / "pg_hba.conf"
    assert "trust" not in " ".join(line for line in hba.read_text().splitlines()
                                   if not line.lstrip().startswith("#"))
    migrated = _cli(home, "migrate")  # any other output shows the URL redacted
    assert migrated.returncode == 0, migrated.stderr
    assert password not in migrated.stderr + migrated.stdout and "***" in migrated.stderr


def test_an_older_trust_cluster_is_upgraded_in_place(home):
    cluster = EmbeddedCluster(home)
    url = cluster.url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (x int)")
    cluster.stop()
    hba = cluster.pgdata / "pg_hba.conf"  # what older releases wrote: trust, and no password file
    hba.write_text("\n".join(line.replace("scram-sha-256", "trust") for line in hba.read_text().splitlines()) + "\n")
    (home / "password").unlink()
    res = _cli(home, "db", "url")
    assert res.returncode == 0, res.stderr
    new = res.stdout.strip()
    with psycopg.connect(new) as conn:
        assert conn.execute("SELECT to_regclass('kept') IS NOT NULL").fetchone() == (True,)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(_without_password(new), connect_timeout=5)

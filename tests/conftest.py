"""Real PostgreSQL for every DB test: TEST_DATABASE_URL if set, else testcontainers when a Docker daemon answers,
else an embedded cluster. Each test gets its own database cloned from a template migrated once per session."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from indexer.db import migrate
from indexer.db.scratch import scratch_database
from indexer.db.url import libpq_url
from indexer.settings import VARIABLES, drop_libpq_variables
from tests.support import slow_tests
from tests.support.partition_kit import three_epochs  # noqa: F401 - a fixture of the partition tests

# The indexer's settings in the developer's shell are for their own deployment (a DATABASE_URL, operator keys, alert
# webhooks that post to a real channel): tests set what they test, so none reaches them or the processes they start.
# INDEXER_IMPL stays: `make test-python` runs tests on the Python typing paths with it. libpq's PG* variables go too
# unless TEST_DATABASE_URL names the developer's own server, which they may be needed for.
for _name in set(VARIABLES) - {"INDEXER_IMPL"}:
    os.environ.pop(_name, None)
if not os.environ.get("TEST_DATABASE_URL"):
    drop_libpq_variables()
# `indexer run` serves /metrics on 127.0.0.1:9464 by default; test processes (and other suites on this machine) would
# fight over it, so every `indexer run` a test starts binds a free port instead
os.environ["INDEXER_METRICS_ADDR"] = "127.0.0.1:0"


def _docker_answers() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def pg_admin_url():
    explicit = os.environ.get("TEST_DATABASE_URL")
    if explicit:
        yield libpq_url(explicit)
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16", driver=None) as pg:
            yield libpq_url(pg.get_connection_url())
        return
    from indexer.db.embedded import EmbeddedCluster

    home = Path(tempfile.mkdtemp(prefix="indexer-test-"))
    cluster = EmbeddedCluster(home, tuned_for_tests=True)
    url = cluster.url("postgres")
    try:
        yield url
    finally:
        cluster.destroy()  # as root the cluster lives under /var/lib/devshard-indexer: removed with the home


@pytest.fixture(scope="session")
def template_db(pg_admin_url):
    with scratch_database(pg_admin_url, "indexer_tmpl") as url:
        migrate.upgrade(url)
        yield urlsplit(url).path.lstrip("/")


@pytest.fixture
def db_url(pg_admin_url, template_db):
    """A fresh, migrated database for one test."""
    with scratch_database(pg_admin_url, "indexer_t", template=template_db) as url:
        yield url


@pytest.fixture
def second_db_url(pg_admin_url, template_db):
    """Another fresh, migrated database (for run-A-vs-run-B comparisons)."""
    with scratch_database(pg_admin_url, "indexer_t2", template=template_db) as url:
        yield url


@pytest.fixture
def empty_db_url(pg_admin_url):
    """A fresh database with no schema (for migration tests)."""
    with scratch_database(pg_admin_url, "indexer_e") as url:
        yield url


@pytest.fixture
def conn(db_url):
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


@pytest.fixture(scope="session")
def demo_db_url(pg_admin_url, template_db):
    """One database loaded with `indexer demo --epochs 3` (the devnet polled over HTTP) and one `indexer alerts
    --once`, shared read-only by the dashboard, report and browser tests: they must not write to it."""
    import sys

    with scratch_database(pg_admin_url, "indexer_demo", template=template_db) as url:
        for command in (["demo", "--epochs", "3"], ["alerts", "--once"]):
            run = subprocess.run([sys.executable, "-m", "indexer", *command, "--database-url", url],
                                 capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stderr[-2000:]
        yield url



@pytest.hookimpl(tryfirst=True)  # before -m and -k deselect anything
def pytest_collection_modifyitems(config, items):
    """Mark the tests tests/support/slow_tests.py lists as `slow` (`make quick` leaves them out)."""
    marked, stale = slow_tests.marked([item.nodeid for item in items])
    if stale:
        raise pytest.UsageError(f"tests/support/slow_tests.py SLOW names tests that do not exist: {', '.join(stale)}")
    for item in items:
        if item.nodeid in marked:
            item.add_marker(pytest.mark.slow)

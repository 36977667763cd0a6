"""The indexer's settings and libpq's variables in the developer's shell (a DATABASE_URL, alert webhooks, operator
keys, PGSSLMODE, …) do not reach the tests: tests/conftest.py removes them before any test runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from indexer.settings import VARIABLES

ROOT = Path(__file__).resolve().parents[1]
SHELL = {"DATABASE_URL": "postgresql://u:p@db.example:5432/prod", "INDEXER_HOME": "/home/me/prod-indexer",
         "INDEXER_ALERT_WEBHOOKS": "https://hooks.example/real-channel", "GONKA_OPERATOR_ADDRESS": "gonka1me",
         "INDEXER_METRICS_ADDR": "0.0.0.0:9464", "PGSSLMODE": "require", "PGHOSTADDR": "192.0.2.1",
         "INDEXER_LEASE_SECONDS": "3600"}


def test_the_shell_settings_are_gone_in_the_session():
    leaked = (set(VARIABLES) - {"INDEXER_IMPL", "INDEXER_METRICS_ADDR"}) & os.environ.keys()
    assert not leaked and not [k for k in os.environ if k.startswith("PG")]
    assert os.environ["INDEXER_METRICS_ADDR"] == "127.0.0.1:0"


def test_a_session_started_from_a_configured_shell_is_clean():
    env = {k: v for k, v in os.environ.items() if k not in ("TEST_DATABASE_URL", "PYTEST_ADDOPTS")} | SHELL
    test = ROOT / "tests" / "test_hermetic.py"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                          str(test), "-k", "gone_in_the_session"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]

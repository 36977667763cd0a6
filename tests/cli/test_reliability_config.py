"""Issue 9 items 9 and 10: settings that cannot work are bad usage (exit 2) with a message saying what is wrong,
before any database is touched."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args, env: dict, home: Path):
    base = {**os.environ, "COLUMNS": "200", "INDEXER_HOME": str(home)}
    base.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "indexer", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, env, words", [
    (("db", "url"), {"DATABASE_URL": ""}, ("DATABASE_URL", "empty")),
    (("db", "url"), {"DATABASE_URL": "mysql://u@h/db"}, ("DATABASE_URL", "not a PostgreSQL URL", "mysql")),
    (("--database-url", "", "db", "url"), {}, ("--database-url", "empty")),
    (("--database-url", "mysql://u@h/db", "migrate"), {}, ("--database-url", "not a PostgreSQL URL")),
])
def test_unusable_database_url_is_exit_2_with_a_clear_message(tmp_path, args, env, words):
    res = _run(*args, env=env, home=tmp_path)
    assert res.returncode == 2, res.stderr
    assert all(w in res.stderr for w in words), res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "pgdata").exists()  # the embedded cluster was not started instead


def test_batch_lines_zero_is_rejected_by_the_parser(tmp_path):
    (tmp_path / "x.ndjson").write_text("")
    res = _run("--database-url", "postgresql://nobody@127.0.0.1:1/none", "ingest", "--batch-lines", "0",
               str(tmp_path / "x.ndjson"), env={}, home=tmp_path)
    assert res.returncode == 2
    assert "--batch-lines" in res.stderr and "at least 1" in res.stderr

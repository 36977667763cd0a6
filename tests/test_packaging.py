"""`pip install .` (a wheel, not an editable install) into a fresh virtual environment outside the checkout gives a
working `indexer`: it migrates a database from the SQL and migrations shipped inside the package, and runs the demo.

The new environment gets the project's dependencies from this test environment's site-packages (a path line in a
.pth file: no download), and the project itself only from the wheel."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def test_wheel_install_outside_the_checkout_migrates_and_runs_the_demo(tmp_path, empty_db_url):
    wheels = tmp_path / "wheels"
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(wheels)])
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("devshard_indexer-*.whl")

    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    made = _run([base_python, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # dependencies from this environment, read as a plain path (its own .pth files, e.g. the editable install of
    # this checkout, are not processed for a path added this way)
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])
    assert installed.returncode == 0, installed.stderr[-2000:]

    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DATABASE_URL")}
    env["INDEXER_HOME"] = str(tmp_path / "home")
    where = _run([str(python), "-c", "import indexer; print(indexer.__file__)"], cwd=workdir, env=env)
    assert where.stdout.strip().startswith(site), where.stdout + where.stderr  # the wheel's copy, not the checkout

    indexer = str(venv / "bin" / "indexer")
    migrated = _run([indexer, "--database-url", empty_db_url, "migrate"], cwd=workdir, env=env)
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT count(*) FROM pg_views WHERE schemaname = 'api'").fetchone()[0] >= 8
    demo = _run([indexer, "--database-url", empty_db_url, "demo", "--epochs", "2"], cwd=workdir, env=env)
    assert demo.returncode == 0, demo.stderr[-3000:]
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT count(*) FROM api.inferences").fetchone()[0] > 0

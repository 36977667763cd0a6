"""`pip install .` (a wheel, not an editable install) into a fresh virtual environment outside the checkout gives a
working `indexer`: it migrates a database from the SQL and migrations shipped inside the package, and runs the demo.
Built on a machine without a C compiler (CC=/bin/false), the wheel still builds (the C block typer is optional),
installs, and runs the demo on the Python typing paths.

The new environment gets the project's dependencies from this test environment's site-packages (a path line in a
.pth file: no download), and the project itself only from the wheel."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.parametrize("compiler", ["cc", "none"])
def test_wheel_install_outside_the_checkout_migrates_and_runs_the_demo(tmp_path, empty_db_url, compiler):
    wheels, source = tmp_path / "wheels", tmp_path / "source"
    # a copy of the sources without what a build here left (build/, the in-place extension), as a clean clone has
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "*.so", "__pycache__", ".indexer", ".hypothesis", ".pytest_cache"))
    build_env = dict(os.environ)
    if compiler == "none":  # every compile fails, as on a machine without gcc or the Python headers
        build_env.update(CC="/bin/false", LDSHARED="/bin/false")
    built = _run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", str(source), "-w", str(wheels)],
                 env=build_env)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("devshard_indexer-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        compiled = [name for name in archive.namelist()
                    if name.startswith("indexer/load/typed/_typer") and name.endswith(".so")]
    assert bool(compiled) == (compiler == "cc"), compiled
    if compiler == "none":
        assert "building extension \"indexer.load.typed._typer\" failed" in built.stdout + built.stderr

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
    # the installed wheel's own default typing path is checked: an INDEXER_IMPL of the suite's run must not reach it
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DATABASE_URL", "INDEXER_IMPL")}
    env["INDEXER_HOME"] = str(tmp_path / "home")
    where = _run([str(python), "-c", "import indexer; print(indexer.__file__)"], cwd=workdir, env=env)
    assert where.stdout.strip().startswith(site), where.stdout + where.stderr  # the wheel's copy, not the checkout
    schema = _run([str(python), "-c", "from indexer.db.paths import SQL_DIR, MIGRATIONS_DIR as M; print(SQL_DIR, M)"],
                  cwd=workdir, env=env).stdout.split()
    assert schema == [str(Path(site, "indexer", "sql")), str(Path(site, "indexer", "migrations"))], schema
    impl = _run([str(python), "-c", "from indexer.load.typed import IMPL; print(IMPL)"], cwd=workdir, env=env)
    assert impl.stdout.strip() == ("c" if compiler == "cc" else "python"), impl.stdout + impl.stderr

    indexer = str(venv / "bin" / "indexer")
    migrated = _run([indexer, "--database-url", empty_db_url, "migrate"], cwd=workdir, env=env)
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT count(*) FROM pg_views WHERE schemaname = 'api'").fetchone()[0] >= 8
    demo = _run([indexer, "--database-url", empty_db_url, "demo", "--epochs", "2"], cwd=workdir, env=env)
    assert demo.returncode == 0, demo.stderr[-3000:]
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT count(*) FROM api.inferences").fetchone()[0] > 0

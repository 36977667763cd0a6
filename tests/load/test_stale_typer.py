"""A C block typer built from another version of ``_typer.c`` (a checkout updated without a reinstall) takes
``configure`` arguments of another shape: typing falls back to the Python paths with one warning, and
``INDEXER_IMPL=c`` refuses with the remedy, instead of every load failing with a TypeError."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STALE = """
import sys, types
stale = types.ModuleType("indexer.load.typed._typer")
def configure(specs):
    raise TypeError("function takes exactly 3 arguments (4 given)")
stale.configure = configure
sys.modules["indexer.load.typed._typer"] = stale
import indexer.load.typed.native as native
print(native.IMPL, native.type_block is None)
"""


def _run(impl: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, INDEXER_IMPL=impl, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", STALE], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_a_stale_build_falls_back_to_the_python_paths_with_one_warning():
    done = _run("auto")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["python", "True"]
    assert "built from another version of _typer.c" in done.stderr and "make venv" in done.stderr


@pytest.mark.parametrize("impl", ["c"])
def test_a_stale_build_under_indexer_impl_c_names_the_remedy(impl):
    done = _run(impl)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: INDEXER_IMPL=c but the C block typer was built from another version"), last
    assert "pip install -e ." in last

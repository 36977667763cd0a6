"""The Makefile's first-run targets under what a user's shell may hold: a half-made venv (Debian's python3.11 without
python3.11-venv), pip and Python variables that would send the install or the imports elsewhere, and a DATABASE_URL
exported for other programs. The Makefile runs in a scratch copy whose `python` and `indexer` are stand-ins that
record how they were called, so no package is installed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# a stand-in program: appends its arguments and the variables the Makefile may change to $RECORD, then exits 0
RECORDER = """#!/bin/sh
exec {python} -c 'import json, os, sys
keep = [k for k in os.environ if k.startswith("PIP_") or k in ("PYTHONPATH", "PYTHONHOME", "DATABASE_URL")]
with open(os.environ["RECORD"], "a") as fh:
    fh.write(json.dumps({{"args": sys.argv[1:], "env": {{k: os.environ[k] for k in keep}}}}) + "\\n")
' "$@"
"""


@pytest.fixture
def checkout(tmp_path):
    """A scratch copy of the Makefile with the files its venv target depends on."""
    root = tmp_path / "checkout"
    (root / "indexer" / "load" / "typed").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", root / "Makefile")
    (root / "pyproject.toml").write_text("")
    (root / "indexer" / "load" / "typed" / "_typer.c").write_text("")
    return root


def _stand_in(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RECORDER.format(python=shutil.which("python3") or "/usr/bin/python3"))
    path.chmod(0o755)


def _make(checkout: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PIP_", "PYTHONPATH", "PYTHONHOME")) and k != "DATABASE_URL"}
    return subprocess.run(["make", "-C", str(checkout), *args], env=base | {"RECORD": str(checkout / "record")} | env,
                          capture_output=True, text=True, timeout=60)


def _records(checkout: Path) -> list[dict]:
    return [json.loads(line) for line in (checkout / "record").read_text().splitlines()]


def test_a_venv_the_python_could_not_finish_is_not_left_behind(checkout, tmp_path):
    """Debian's python3.11 without python3.11-venv makes .venv/bin/python, then fails (no ensurepip): the next
    `make` must not take that venv as made and fail in pip with a message naming neither cause."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    half = ("#!/bin/sh\nmkdir -p .venv/bin && ln -sf /bin/false .venv/bin/python\n"
            "echo 'ensurepip is not available' >&2\nexit 1\n")
    for name in ("python3.11", "python3"):
        (fake_bin / name).write_text(half)
        (fake_bin / name).chmod(0o755)
    path = f"{fake_bin}:{os.environ['PATH']}"
    for _ in range(2):  # the second run meets what the first one left
        res = _make(checkout, "venv", PATH=path)
        assert res.returncode != 0
        assert "apt-get install python3.11-venv" in res.stderr, res.stderr
        assert not (checkout / ".venv").exists()


def test_pip_and_python_variables_of_the_shell_do_not_steer_the_install(checkout):
    _stand_in(checkout / ".venv" / "bin" / "python")
    res = _make(checkout, "venv", PIP_USER="1", PIP_TARGET="/elsewhere", PIP_PREFIX="/elsewhere", PIP_ROOT="/x",
                PIP_NO_DEPS="1", PIP_REQUIRE_HASHES="1", PYTHONPATH="/another/checkout", PYTHONHOME="/nowhere",
                PIP_INDEX_URL="https://mirror.example/simple", PIP_FIND_LINKS="/opt/wheels")
    assert res.returncode == 0, res.stderr
    installs = [r for r in _records(checkout) if r["args"][:3] == ["-m", "pip", "install"]]
    assert [r["args"][3:] for r in installs] == [["-q", "--upgrade", "pip"], ["-q", "-e", ".[test]"]]
    for record in installs:  # where packages come from stays the user's
        assert record["env"] == {"PIP_USER": "0", "PIP_INDEX_URL": "https://mirror.example/simple",
                                 "PIP_FIND_LINKS": "/opt/wheels"}, record
    assert (checkout / ".venv" / ".installed").exists()


def _made_venv(checkout: Path) -> None:
    _stand_in(checkout / ".venv" / "bin" / "indexer")
    (checkout / ".venv" / ".installed").touch()


def test_make_demo_leaves_a_database_url_of_the_shell_alone(checkout):
    _made_venv(checkout)
    res = _make(checkout, "demo", DATABASE_URL="postgresql://u:p@db.example/prod")
    assert res.returncode == 0, res.stderr
    assert "DATABASE_URL is set in the environment and not used" in res.stderr
    (record,) = _records(checkout)
    assert record["args"] == ["demo"] and "DATABASE_URL" not in record["env"]


def test_make_demo_takes_a_database_url_given_to_make(checkout):
    _made_venv(checkout)
    res = _make(checkout, "demo", "DATABASE_URL=postgresql://u:p@127.0.0.1/mine")
    assert res.returncode == 0, res.stderr
    assert "not used" not in res.stderr
    (record,) = _records(checkout)
    assert record["env"]["DATABASE_URL"] == "postgresql://u:p@127.0.0.1/mine"

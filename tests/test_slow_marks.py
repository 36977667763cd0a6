"""The `slow` marks (tests/support/slow_tests.py): what a name covers, and a name that no longer matches a test is
caught."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.slow_tests import SLOW, marked

ROOT = Path(__file__).resolve().parents[1]


def test_a_name_covers_its_file_or_test_and_every_parameter():
    ids = ["tests/test_a.py::test_x", "tests/test_a.py::test_x[1]", "tests/test_a.py::test_xy",
           "tests/test_b.py::test_y", "tests/test_b.py::K::test_z"]
    got, stale = marked(ids, ["tests/test_a.py::test_x", "tests/test_b.py"])
    assert got == {"tests/test_a.py::test_x", "tests/test_a.py::test_x[1]", "tests/test_b.py::test_y",
                   "tests/test_b.py::K::test_z"}
    assert stale == []


def test_a_name_matching_nothing_in_a_collected_file_is_stale():
    ids = ["tests/test_a.py::test_x"]
    got = marked(ids, ["tests/test_a.py::test_gone", "tests/test_other.py::test_y"])
    assert got == (set(), ["tests/test_a.py::test_gone"])  # a file not collected (run alone, -k, …) is not checked


def test_every_slow_name_is_a_test_of_the_suite():
    listed = {name.split("::")[0] for name in SLOW}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", *sorted(listed)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "SLOW names tests that do not exist" not in out.stdout + out.stderr

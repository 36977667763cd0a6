"""Issue 9 item 14: Ctrl-C during an ingest prints one line naming the file and the line up to which everything is
committed, exits 130, and a rerun resumes from there."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from indexer.synth import generate, write_ndjson

ROOT = Path(__file__).resolve().parents[1]


def _committed(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT max(lines_committed) FROM rec.source").fetchone()
    return row[0] or 0


def test_sigint_after_a_committed_batch_is_one_clear_line_and_exit_130(db_url, tmp_path):
    path = tmp_path / "big.ndjson"
    write_ndjson(str(path), generate(seed=3, escrows=60, inferences=300, epochs=2))
    env = {**os.environ, "COLUMNS": "300"}
    env.pop("DATABASE_URL", None)
    # its own process group, so the signal reaches the workers too, as Ctrl-C in a terminal does
    proc = subprocess.Popen([sys.executable, "-m", "indexer", "--database-url", db_url, "ingest", str(path),
                             "--no-progress", "--batch-lines", "2000"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _committed(db_url) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the database for the condition, not a timed guess
    assert proc.poll() is None, "the ingest finished before it could be interrupted: make the file bigger"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert proc.returncode == 130, err.decode()
    assert len(lines) == 1, err.decode()
    assert "interrupted" in lines[0] and str(path.resolve()) in lines[0]
    stopped = int(lines[0].split("after line ")[1].split()[0])
    assert stopped == _committed(db_url) and stopped > 0
    total = sum(1 for _ in open(path, "rb"))
    assert stopped < total
    res = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "ingest", str(path),
                          "--no-progress"], cwd=ROOT, env=env, capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr.decode()
    assert _committed(db_url) == total

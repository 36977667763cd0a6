"""kill -9 during `indexer ingest`, rerun: the database ends exactly as after one clean run, and the rerun resumes."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from indexer.synth import generate, write_ndjson
from tests.support.helpers import db_state, ingest

ROOT = Path(__file__).resolve().parents[2]
RESUME_VOLATILE = {"loaded_at", "amended_at", "replayed_at", "marked_at", "quarantined_at", "first_seen_at",
            "last_loaded_at", "completed_at", "source_id", "amendment_id"}






def _ingest_cmd(url: str, path: Path) -> list[str]:
    return [sys.executable, "-m", "indexer", "--database-url", url, "ingest", str(path), "--batch-lines", "2000",
            "--no-progress"]


def _env() -> dict:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("DATABASE_URL", None)
    return env


def _wait_for_first_commit(proc: subprocess.Popen, url: str, timeout: float = 60.0) -> int:
    """Poll the database until the ingest has committed at least one batch; return the cursor."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as c:
        while time.monotonic() < deadline:
            row = c.execute("SELECT max(lines_committed) FROM rec.source").fetchone()
            if row[0]:
                return row[0]
            assert proc.poll() is None, f"ingest exited early: {proc.communicate()}"
            time.sleep(0.005)  # poll interval, not synchronisation: the loop waits for the condition above
    pytest.fail("the ingest committed nothing within the time limit")


def test_kill_during_ingest_then_rerun_equals_a_clean_run(tmp_path, db_url, second_db_url):
    path = tmp_path / "synth.ndjson"
    total = write_ndjson(str(path), generate(seed=11, escrows=40, inferences=200, epochs=2))
    assert total > 50_000

    proc = subprocess.Popen(_ingest_cmd(db_url, path), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        _wait_for_first_commit(proc, db_url)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with psycopg.connect(db_url) as c:
        committed, completed = c.execute("SELECT lines_committed, completed_at FROM rec.source").fetchone()
        loaded = c.execute("SELECT count(*) FROM rec.start_tx").fetchone()[0]
    assert 0 < committed < total and completed is None, "the kill must land in the middle of the load"
    assert loaded > 0

    rerun = subprocess.run(_ingest_cmd(db_url, path), cwd=ROOT, env=_env(), capture_output=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr.decode()
    out = rerun.stderr.decode()
    skipped = int(re.search(r"resumed past \(already committed\)\D*(\d+)", out).group(1))
    assert skipped == committed > 0  # resumed after the committed cursor, not reloaded from the start
    loaded_now = int(re.search(r"loaded \(new\)\D*(\d+)", out).group(1))
    assert loaded_now == total - skipped

    ingest(second_db_url, path, batch_lines=2000)
    resumed, clean = db_state(db_url, RESUME_VOLATILE), db_state(second_db_url, RESUME_VOLATILE)
    assert resumed.keys() == clean.keys()
    for table in clean:
        assert resumed[table] == clean[table], table
    assert len(clean["replay.inference"]) == 40 * 2 * 200
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT lines_committed, completed_at IS NOT NULL FROM rec.source").fetchone() == \
            (total, True)
        assert c.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone() == (0,)

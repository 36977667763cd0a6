"""Issue 9 item 14: Ctrl-C during an ingest prints one line naming the file and the line up to which everything is
committed, exits 130, and a rerun resumes from there; Ctrl-C during a parallel replay stops its workers after the
chunks they are on."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from indexer import workers
from indexer.load.ingest import IngestFailed, IngestInterrupted, ingest_paths
from indexer.records import KINDS
from indexer.replay.run import replay_dirty
from indexer.synth import generate, write_ndjson
from tests.support.helpers import table_snapshot, write_lines

LOADED = sorted(f"rec.{kind.table}" for kind in KINDS.values())
REPLAYED = ["replay.inference", "replay.vote", "replay.slot_stats", "replay.escrow", "replay.rejected_tx"]

ROOT = Path(__file__).resolve().parents[2]


def _committed(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT max(lines_committed) FROM rec.source").fetchone()
    return row[0] or 0


def _cli_ingest_past_its_first_commit(db_url: str, tmp_path):
    """`indexer ingest` of a file that outlasts its first commit, in its own process group (so a signal reaches its
    workers too, as Ctrl-C in a terminal does); returns (process, file, environment) once a batch is committed."""
    path = tmp_path / "big.ndjson"
    write_ndjson(str(path), generate(seed=3, escrows=60, inferences=300, epochs=2))
    env = {**os.environ, "COLUMNS": "300"}
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "indexer", "--database-url", db_url, "ingest", str(path),
                             "--no-progress", "--batch-lines", "2000"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _committed(db_url) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the database for the condition, not a timed guess
    assert proc.poll() is None, "the ingest finished before its first commit was seen: make the file bigger"
    return proc, path, env


def _stderr_lines(proc) -> tuple[list[str], str]:
    err = proc.communicate(timeout=120)[1].decode()
    return [line for line in err.splitlines() if line.strip()], err


def _drop_other_connections(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def test_sigint_after_a_committed_batch_is_one_clear_line_and_exit_130(db_url, tmp_path):
    proc, path, env = _cli_ingest_past_its_first_commit(db_url, tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    lines, err = _stderr_lines(proc)
    assert proc.returncode == 130, err
    assert len(lines) == 1, err
    assert "interrupted" in lines[0] and str(path.resolve()) in lines[0]
    stopped = int(lines[0].split("after line ")[1].split()[0])
    assert stopped == _committed(db_url) and stopped > 0
    total = sum(1 for _ in open(path, "rb"))
    assert stopped < total
    res = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "ingest", str(path),
                          "--no-progress"], cwd=ROOT, env=env, capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr.decode()
    assert _committed(db_url) == total


# In-process: Ctrl-C is held to safe points (indexer.workers.InterruptAtSafePoints). The CLI test above sends the
# signal at whatever moment the database shows a commit; these send it at a chosen point, where a KeyboardInterrupt
# raised on the spot would stop a batch half way, or (in a pool's submit) hang the pool's shutdown for ever.

def _load_acting_at_the_second_batch(url: str, path, act, raises):
    """Ingest, calling ``act()`` as the second batch is about to commit; returns (the ``raises`` exception the load
    ended with, the cursor stored when ``act`` ran)."""
    cursors = []

    def on_batch(lines, escrows):
        cursors.append(_committed(url))
        if len(cursors) == 2:
            act()

    with pytest.raises(raises) as caught:
        ingest_paths(url, [str(path)], batch_lines=800, on_batch=on_batch)
    return caught.value, cursors[1]


def _interrupting_load(url: str, path, signals: int):
    """``signals`` SIGINTs sent to this process as the second batch is about to commit."""
    assert threading.current_thread() is threading.main_thread()  # signal handlers run in the main thread only
    return _load_acting_at_the_second_batch(
        url, path, lambda: [os.kill(os.getpid(), signal.SIGINT) for _ in range(signals)], IngestInterrupted)


def test_ctrl_c_as_a_batch_commits_lets_it_commit_and_stops_before_the_next(db_url, tmp_path):
    path = write_lines(tmp_path / "c.ndjson", generate(seed=5, escrows=12, inferences=80, epochs=1))
    stopped, before = _interrupting_load(db_url, path, signals=1)
    assert stopped.line == _committed(db_url) > before > 0, "the batch under way when Ctrl-C came did not commit"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C is Ctrl-C again afterwards
    ingest_paths(db_url, [str(path)])  # the rerun resumes after that batch
    assert _committed(db_url) == sum(1 for _ in open(path, "rb"))


def test_a_second_ctrl_c_stops_at_once(db_url, tmp_path):
    path = write_lines(tmp_path / "c.ndjson", generate(seed=5, escrows=12, inferences=80, epochs=1))
    stopped, before = _interrupting_load(db_url, path, signals=2)
    assert stopped.line == _committed(db_url) == before  # the batch under way was not committed


def _wait_forever_unless_stopped() -> bool:
    workers._stop_event.wait()
    return workers.stop_requested()


def test_ctrl_c_asks_pool_workers_to_stop_and_raises_when_their_work_is_back():
    with pytest.raises(KeyboardInterrupt):
        with workers.pool(1) as pool, workers.InterruptAtSafePoints(on_request=pool.request_stop):
            future = pool.submit(_wait_forever_unless_stopped)
            os.kill(os.getpid(), signal.SIGINT)
            assert future.result(timeout=60) is True  # the timeout only turns a missing feature into a failure


def test_ctrl_c_stops_the_parallel_replay_after_the_chunks_under_way(db_url, second_db_url, tmp_path):
    path = write_lines(tmp_path / "c.ndjson", generate(seed=7, escrows=40, inferences=120, epochs=1))
    for url in (db_url, second_db_url):
        ingest_paths(url, [str(path)])
    with psycopg.connect(second_db_url) as conn:
        replay_dirty(conn, url=second_db_url, workers=2, chunk=1)
    with psycopg.connect(db_url) as conn:
        dirty = conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone()[0]
    # both workers wait at their first chunk's lock while the signal is sent, so the stop cannot come too late
    blocker = psycopg.connect(db_url)
    blocker.execute("LOCK TABLE replay.inference IN SHARE MODE")

    def interrupt_when_both_wait():
        with psycopg.connect(db_url, autocommit=True) as watch:
            while watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND wait_event_type = 'Lock'").fetchone()[0] < 2:
                time.sleep(0.02)  # polling the server for the condition
        os.kill(os.getpid(), signal.SIGINT)
        blocker.rollback()

    helper = threading.Thread(target=interrupt_when_both_wait)
    helper.start()
    try:
        with psycopg.connect(db_url) as conn, pytest.raises(KeyboardInterrupt):
            replay_dirty(conn, url=db_url, workers=2, chunk=1)
    finally:
        helper.join()
        blocker.close()
    with psycopg.connect(db_url) as conn:
        left = conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone()[0]
        assert 0 < left < dirty, f"{dirty - left} of {dirty} escrows replayed: the workers did not stop"
        replay_dirty(conn, url=db_url, workers=2, chunk=1)  # the rest, as the next run does
    assert table_snapshot(db_url, REPLAYED) == table_snapshot(second_db_url, REPLAYED)


def test_a_connection_lost_mid_load_names_the_file_and_line_and_a_rerun_completes_it(db_url, second_db_url, tmp_path):
    """A database that drops the connection (the backend terminated as the second batch commits): the error names
    the file and the last committed line, and the same command run again ends with a clean load's rows."""
    path = write_lines(tmp_path / "c.ndjson", generate(seed=5, escrows=12, inferences=80, epochs=1))
    ingest_paths(second_db_url, [str(path)])
    failed, before = _load_acting_at_the_second_batch(db_url, path, lambda: _drop_other_connections(db_url),
                                                      IngestFailed)
    assert failed.uri == str(path.resolve()) and failed.line == before == _committed(db_url) > 0
    assert f"after line {before} was committed" in str(failed) and "run the same command again" in str(failed)
    ingest_paths(db_url, [str(path)])
    assert _committed(db_url) == sum(1 for _ in open(path, "rb"))
    assert table_snapshot(db_url, LOADED) == table_snapshot(second_db_url, LOADED)


def test_the_cli_reports_a_lost_connection_with_the_file_and_line_and_exit_1(db_url, tmp_path):
    proc, path, _ = _cli_ingest_past_its_first_commit(db_url, tmp_path)
    _drop_other_connections(db_url)
    lines, err = _stderr_lines(proc)
    assert proc.returncode == 1, err
    assert len(lines) == 1 and str(path.resolve()) in lines[0] and "connection was lost" in lines[0], err
    assert 0 <= int(lines[0].split("after line ")[1].split()[0]) <= _committed(db_url)

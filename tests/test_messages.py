"""What the indexer says when things go the designed way but not the happy one: one clear line each, no
tracebacks for expected outcomes, no message repeated on every tick, and the file and line where input broke."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading

import psycopg

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.poller import schedule
from indexer.poller.leases import Leases
from indexer.sources.gonka import RetryPolicy
from tests.test_archive import loaded  # noqa: F401 - the archive tests' fixture: three epochs, two final

FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=8)
DEADLINE = 60  # seconds: a wait that takes longer than this is a failure, not a slow machine


def test_a_poller_fenced_out_of_its_lease_says_so_in_one_warning_line(db_url, monkeypatch, caplog):
    scn = Scenario(ScenarioConfig(seed=17, epochs=2, escrows_per_epoch=2, inferences_per_escrow=16))
    stolen = sorted(scn.escrows, key=int)[0]
    fresh_cursors = Leases.escrow_cursors

    def then_stolen(self, escrow_id):  # the poller "pauses" past its lease and another one takes the escrow over
        out = fresh_cursors(self, escrow_id)
        if escrow_id == stolen:
            with psycopg.connect(db_url) as c:
                c.execute("UPDATE net.lease SET holder = 'thief:3:x', expires_at = now() + interval '1 hour' "
                          "WHERE resource = %s", (f"escrow:{stolen}",))
        return out

    monkeypatch.setattr(Leases, "escrow_cursors", then_stolen)
    failures = []
    # one tick of the scheduler: the job runs once, in this thread
    monkeypatch.setattr(schedule, "run_jobs", lambda jobs: [fn() for fn, _, job_id in jobs if job_id == "poll"])
    caplog.set_level(logging.INFO)
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        schedule.run_forever(db_url, net.chain_rest_url, net.rpc_url, policy=FAST, lease_seconds=30,
                             holder="stale:4:y", on_failure=failures.append, private_hosts=True)
    mine = [r for r in caplog.records if r.name == "indexer.poller.schedule"]
    assert [(r.levelname, r.exc_info) for r in mine] == [("WARNING", None)]
    text = mine[0].getMessage()
    assert text.startswith(f"poll cycle ended early: lease escrow:{stolen} lost to thief:3:x") and "\n" not in text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [type(f).__name__ for f in failures] == ["LeaseLost"]  # still counted as a failed cycle (metrics)


def test_a_run_that_outlasts_its_interval_is_said_once_not_on_every_tick(caplog):
    from indexer.interval_jobs import run_jobs

    caplog.set_level(logging.INFO)
    overrun_said, ticks_after = threading.Event(), threading.Event()
    ticks = []

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "longer than its" in record.getMessage():
                overrun_said.set()

    def slow() -> None:  # outlasts its interval until the ticker has run three times after the overrun was said
        assert overrun_said.wait(DEADLINE), "no overrun message"
        assert ticks_after.wait(DEADLINE), "the ticker stopped"
        os.kill(os.getpid(), signal.SIGTERM)  # run_jobs stops as under `indexer run`: after the running jobs end

    def ticker() -> None:  # same interval as slow: each of its runs is a tick at which slow was skipped
        if overrun_said.is_set():
            ticks.append(1)
            if len(ticks) >= 3:
                ticks_after.set()

    said = Said()
    logging.getLogger("indexer.interval_jobs").addHandler(said)
    try:
        run_jobs([(slow, 0.05, "poll"), (ticker, 0.05, "ticker")])
    finally:
        logging.getLogger("indexer.interval_jobs").removeHandler(said)
    messages = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert not [m for m in messages if "maximum number of running instances" in m[2]], messages
    warnings = [m for m in messages if m[0] == "indexer.interval_jobs" and m[1] == "WARNING"]
    assert warnings == [("indexer.interval_jobs", "WARNING", "poll: a run is taking longer than its 0.05 s interval; "
                         "runs never overlap, the next one starts at the first tick after it ends")]
    ended = [m[2] for m in messages if m[0] == "indexer.interval_jobs" and "tick(s) skipped" in m[2]]
    assert len(ended) == 1 and ended[0].startswith("poll: the run that outlasted its interval ended; ")
    assert int(ended[0].split("; ")[1].split()[0]) >= 2
    # the filter is gone with the scheduler: APScheduler's own logger is as it was
    assert not logging.getLogger("apscheduler.scheduler").filters


def _truncated_gz(path, lines: int = 5000, keep: float = 0.6) -> int:
    """A gzip file cut short, as an interrupted copy leaves it; returns the line the cut falls in."""
    import gzip
    import zlib

    body = b"".join(f'{{"kind":"start","escrow_id":"9","inference_id":{i},"diff_nonce":{i}}}\n'.encode()
                    for i in range(lines))
    packed = gzip.compress(body)
    cut = packed[: int(len(packed) * keep)]
    path.write_bytes(cut)
    whole = zlib.decompressobj(wbits=31).decompress(cut)  # everything before the cut that can be read
    return whole.count(b"\n") + 1


def test_a_truncated_gzip_file_is_reported_at_the_line_it_breaks_in(tmp_path):
    import pytest

    from indexer.sources.ndjson import InputError, open_input

    path = tmp_path / "capture.ndjson.gz"
    line = _truncated_gz(path)
    assert line > 2000  # well past the first line: the whole file fits in one read chunk
    blocks = []
    with pytest.raises(InputError) as caught:
        for first, block in open_input(str(path)).open_blocks(50_000):
            blocks.append((first, block))
    assert str(caught.value) == (f"{path}: corrupt or truncated gzip data in line {line}: Compressed file ended "
                                 "before the end-of-stream marker was reached")
    # every whole line before the break was handed over first (the broken line is not)
    assert sum(block.count(b"\n") for _, block in blocks) == line - 1


def test_ingest_of_a_truncated_gzip_file_names_the_file_and_line(db_url, tmp_path):
    path = tmp_path / "capture.ndjson.gz"
    line = _truncated_gz(path)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    res = subprocess.run([sys.executable, "-m", "indexer", "ingest", str(path), "--no-progress", "--database-url",
                          db_url], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert f"capture.ndjson.gz: corrupt or truncated gzip data in line {line}: Compressed file" in res.stderr


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.run([sys.executable, "-m", "indexer", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_archive_rerun_names_an_archived_file_that_was_deleted(loaded, tmp_path):
    from indexer.archive import epoch_file

    out = tmp_path / "archive"
    first = _cli("--database-url", loaded, "archive", "--before", "402", "--to", str(out))
    assert first.returncode == 0, first.stderr
    (out / epoch_file(400)).unlink()
    (out / epoch_file(401)).write_bytes(b"\x1f\x8b cut short")
    again = _cli("--database-url", loaded, "archive", "--before", "402", "--to", str(out))
    assert again.returncode == 1
    assert "archived 0 epoch(s)" in again.stderr
    line = [x for x in again.stderr.splitlines() if x.startswith("error:")]
    assert len(line) == 1 and f"2 file(s) listed in its manifest are missing or damaged: {epoch_file(400)} (epoch " \
        "400, " in line[0] and ": missing; " in line[0] and f"{epoch_file(401)} (epoch 401, " in line[0]


def test_ingest_checks_an_archived_file_against_its_manifest(loaded, db_url, tmp_path):
    from indexer.archive import epoch_file

    out = tmp_path / "archive"
    assert _cli("--database-url", loaded, "archive", "--before", "402", "--to", str(out)).returncode == 0
    good = _cli("--database-url", db_url, "ingest", str(out / epoch_file(400)), "--no-progress")
    assert good.returncode == 0, good.stderr
    damaged = out / epoch_file(401)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    res = _cli("--database-url", db_url, "ingest", str(damaged), "--no-progress")
    assert res.returncode == 2
    assert f"{damaged}: sha256 " in res.stderr and "the archived file was changed or damaged" in res.stderr
    with psycopg.connect(db_url) as c:  # nothing of it loaded
        assert c.execute("SELECT count(*) FROM rec.escrow WHERE epoch_index = 401").fetchone() == (0,)


_DISK_FULL = """
CREATE FUNCTION public.disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.source_line > 1200 THEN  -- what the server says when a write finds the disk full
        RAISE EXCEPTION 'could not extend file "base/16384/2619": No space left on device'
            USING ERRCODE = 'disk_full', HINT = 'Check free disk space.';
    END IF;
    RETURN NEW;
END $$;
"""


def test_a_full_disk_names_the_file_and_the_last_committed_line_like_a_lost_connection(db_url, conn, tmp_path):
    from tests.support.helpers import escrow, tx, write_lines

    path = write_lines(tmp_path / "many.ndjson", [escrow()] + [tx("start", i, i) for i in range(1, 3000)])
    # the server's own error, SQLSTATE 53100, raised as the rows of line 1201 on reach the table
    conn.execute(_DISK_FULL)
    conn.execute("CREATE TRIGGER disk_full BEFORE INSERT ON rec.start_tx FOR EACH ROW EXECUTE FUNCTION "
                 "public.disk_full()")
    res = _cli("--database-url", db_url, "ingest", str(path), "--no-progress", "--batch-lines", "400")
    assert res.returncode == 1
    lines = res.stderr.splitlines()
    committed = conn.execute("SELECT lines_committed FROM rec.source").fetchone()[0]
    assert 0 < committed <= 1200
    assert lines == [f"error: {path.resolve()}: the database server's disk is full after line {committed} was "
                     "committed (could not extend file \"base/16384/2619\": No space left on device); run the same "
                     "command again to resume from there"], res.stderr
    conn.execute("DROP TRIGGER disk_full ON rec.start_tx")  # space freed: the same command finishes the load
    again = _cli("--database-url", db_url, "ingest", str(path), "--no-progress", "--batch-lines", "400")
    assert again.returncode == 0, again.stderr
    assert conn.execute("SELECT count(*) FROM rec.start_tx").fetchone() == (2999,)

"""Issue 9 item 2: two `indexer ingest` processes at once, on files touching the same epochs, end with exactly the
findings of a serial run, and no dirty mark is left behind (a stranded mark is never evaluated again)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg

from indexer.db.scratch import scratch_database
from indexer.synth import generate
from tests.support.helpers import write_lines

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 4


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Epoch-level records, then the escrows of both epochs dealt alternately to two files."""
    setup, parts, owner = [], ([], []), {}
    for rec in generate(seed=11, escrows=12, inferences=40, epochs=2, mix="adversarial"):
        if rec["kind"] in ("epoch", "model_snapshot"):
            setup.append(rec)
            continue
        eid = rec["escrow_id"]
        owner.setdefault(eid, len(owner) % 2)
        parts[owner[eid]].append(rec)
    return (write_lines(tmp_path / "setup.ndjson", setup), write_lines(tmp_path / "a.ndjson", parts[0]),
            write_lines(tmp_path / "b.ndjson", parts[1]))


def _ingest(url: str, *paths: Path) -> subprocess.Popen:
    env = {**os.environ}
    env.pop("DATABASE_URL", None)
    return subprocess.Popen([sys.executable, "-m", "indexer", "--database-url", url, "ingest", "--no-progress",
                             "--allow-quarantine", *map(str, paths)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen) -> None:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()


def _outcome(url: str) -> tuple[list, dict]:
    with psycopg.connect(url) as c:
        cols = [r[0] for r in c.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'api' "
            "AND table_name = 'disputable_penalties' AND column_name <> 'detected_at' ORDER BY ordinal_position")]
        rows = c.execute(f"SELECT {', '.join(cols)} FROM api.disputable_penalties ORDER BY "
                         f"{', '.join(str(i + 1) for i in range(len(cols)))}").fetchall()
        marks = {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                 for t in ("replay.dirty_escrow", "rules.dirty_epoch", "rules.dirty_escrow")}
    return [tuple(map(str, r)) for r in rows], marks


def test_two_concurrent_ingests_match_a_serial_run(pg_admin_url, template_db, tmp_path):
    setup, a, b = _files(tmp_path)
    with scratch_database(pg_admin_url, "indexer_ser", template=template_db) as url:
        for path in (setup, a, b):
            _finish(_ingest(url, path))
        serial, marks = _outcome(url)
    assert serial and marks == {"replay.dirty_escrow": 0, "rules.dirty_epoch": 0, "rules.dirty_escrow": 0}
    for trial in range(TRIALS):
        with scratch_database(pg_admin_url, "indexer_conc", template=template_db) as url:
            _finish(_ingest(url, setup))
            procs = [_ingest(url, a), _ingest(url, b)]
            for proc in procs:
                _finish(proc)
            rows, marks = _outcome(url)
        assert marks == {"replay.dirty_escrow": 0, "rules.dirty_epoch": 0, "rules.dirty_escrow": 0}, trial
        assert rows == serial, f"trial {trial}: {len(rows)} disputable penalties, serial run {len(serial)}"


def test_a_rules_run_skips_an_epoch_whose_replay_is_not_committed(db_url, tmp_path):
    """The interleaving the stress test above looks for, made deterministic with two connections: a replay chunk
    is written but not committed while another process's rules run claims dirty epochs."""
    from indexer.replay.run import ReplaySummary, replay_chunk
    from indexer.load.ingest import ingest_paths
    from indexer.rules.run import run_rules
    from tests.support.helpers import escrow, ingest, tx

    ingest(db_url, write_lines(tmp_path / "one.ndjson", [
        escrow(), tx("start", 100, 100, prompt_hash="ab" * 32, input_length=10, max_tokens=5)]), rules=True)
    # a late record for the escrow (its replay mark), and its epoch already marked by some other escrow's replay
    ingest_paths(db_url, [str(write_lines(tmp_path / "two.ndjson", [tx("confirm_start", 100, 101)]))])  # load only
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("INSERT INTO rules.dirty_epoch (epoch_index, whole) VALUES (408, false)")

    with psycopg.connect(db_url) as replayer, psycopg.connect(db_url) as rules:
        with replayer.transaction():  # the production chunk, held open: its own transaction is a savepoint here
            replayed = ReplaySummary()
            assert replay_chunk(replayer, 50, replayed)
            assert replayed.escrows == 1
            during = run_rules(rules)  # the other process, while the replay is uncommitted
        assert during.epochs == 0  # it did not evaluate epoch 408 from the replay it cannot see yet
        with replayer.cursor() as cur:
            stranded = cur.execute("SELECT escrow_id FROM rules.dirty_escrow d WHERE NOT EXISTS "
                                   "(SELECT 1 FROM rules.dirty_epoch e WHERE e.epoch_index = d.epoch_index)"
                                   ).fetchall()
        assert stranded == []
        after = run_rules(rules)
    assert after.epochs == 1
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT (SELECT count(*) FROM rules.dirty_escrow) + (SELECT count(*) FROM rules.dirty_epoch)"
                         ).fetchone() == (0,)

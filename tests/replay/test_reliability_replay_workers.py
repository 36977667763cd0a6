"""A replay process that dies costs at most its escrow, never the pass (indexer.replay.run._replay_in_workers).

Real PostgreSQL, real SIGKILLed processes: the replay of one escrow is made to kill the process running it (as an
out-of-memory kill would), every time or only the first time. The replay workers (and the processes the suspects
are replayed in alone) are forked, so the patched ``replay_rows`` is theirs too."""
from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from indexer.load.ingest import ingest_paths
from indexer.replay import run
from indexer.replay.run import ReplayWorkersLost, replay_dirty
from indexer.synth import generate
from tests.support import worker_crash
from tests.support.helpers import table_snapshot, write_lines

REPLAYED = ["replay.inference", "replay.vote", "replay.slot_stats", "replay.escrow", "replay.rejected_tx"]


def _dying(victims: set[str], once: Path | None = None):
    """``replay_rows``, but replaying an escrow in ``victims`` kills the process: every time, or (``once``) only
    the first time, which creates that file."""
    real = run.replay_rows

    def replay_rows(config, rows, **kw):
        if config.escrow_id in victims and (once is None or not once.exists()):
            if once is not None:
                once.write_text("died once")
            worker_crash.die()
        return real(config, rows, **kw)
    return replay_rows


@pytest.fixture
def loaded(db_url, second_db_url, tmp_path):
    """The same 12 escrows loaded into two databases; the second replayed cleanly, as the reference."""
    path = write_lines(tmp_path / "r.ndjson", generate(seed=5, escrows=6, inferences=40, mix="adversarial"))
    for url in (db_url, second_db_url):
        ingest_paths(url, [str(path)])
    with psycopg.connect(second_db_url) as conn:
        assert replay_dirty(conn, url=second_db_url, workers=2, chunk=2).held == []
    with psycopg.connect(db_url) as conn:
        ids = [r[0] for r in conn.execute("SELECT escrow_id FROM replay.dirty_escrow ORDER BY 1")]
    assert len(ids) == 12
    return ids


def _dirty(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT escrow_id FROM replay.dirty_escrow ORDER BY 1")]


def _replayed(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT escrow_id FROM replay.escrow ORDER BY 1")]


@pytest.mark.parametrize("chunk", [2, 50], ids=["six-chunks-two-workers", "one-chunk-one-worker"])
def test_an_escrow_that_kills_its_replay_process_is_held_and_the_pass_goes_on(db_url, second_db_url, loaded,
                                                                              monkeypatch, chunk):
    # one chunk too runs in a process of its own: in this one (the command's) the death would be the command's
    victim = loaded[6]
    monkeypatch.setattr(run, "replay_rows", _dying({victim}))
    with psycopg.connect(db_url) as conn:
        summary = replay_dirty(conn, url=db_url, workers=2, chunk=chunk)
    assert summary.held == [victim]
    assert _dirty(db_url) == [victim]  # left for the next pass, nothing lost
    assert _replayed(db_url) == [eid for eid in loaded if eid != victim]
    monkeypatch.undo()  # whatever killed it is gone: the next pass replays it like the rest
    with psycopg.connect(db_url) as conn:
        assert replay_dirty(conn, url=db_url, workers=2, chunk=2).held == []
    assert _dirty(db_url) == []
    assert table_snapshot(db_url, REPLAYED) == table_snapshot(second_db_url, REPLAYED)


def test_a_death_that_does_not_repeat_costs_nothing(db_url, second_db_url, loaded, monkeypatch, tmp_path):
    monkeypatch.setattr(run, "replay_rows", _dying({loaded[3]}, once=tmp_path / "died-once"))
    with psycopg.connect(db_url) as conn:
        summary = replay_dirty(conn, url=db_url, workers=2, chunk=2)
    assert (tmp_path / "died-once").exists()  # it did die
    assert summary.held == []
    assert _dirty(db_url) == []
    assert table_snapshot(db_url, REPLAYED) == table_snapshot(second_db_url, REPLAYED)


def test_two_killers_are_both_found(db_url, loaded, monkeypatch):
    victims = {loaded[0], loaded[9]}
    monkeypatch.setattr(run, "replay_rows", _dying(victims))
    with psycopg.connect(db_url) as conn:
        summary = replay_dirty(conn, url=db_url, workers=2, chunk=2)
    assert sorted(summary.held) == sorted(victims)
    assert _dirty(db_url) == sorted(victims)
    assert _replayed(db_url) == [eid for eid in loaded if eid not in victims]


def test_when_every_replay_dies_the_pass_fails_with_what_it_found(db_url, loaded, monkeypatch):
    # not a few bad escrows but a broken machine (no memory left, a bad build): the pass stops and says so
    monkeypatch.setattr(run, "replay_rows", _dying(set(loaded)))
    monkeypatch.setattr(run, "MAX_HELD", 3)
    with psycopg.connect(db_url) as conn, pytest.raises(ReplayWorkersLost, match="kill their replay process"):
        replay_dirty(conn, url=db_url, workers=2, chunk=2)
    assert _dirty(db_url) == loaded  # nothing replayed, nothing lost


def test_ingest_says_which_escrow_was_left_and_exits_1_and_replay_finishes_it(db_url, tmp_path, monkeypatch,
                                                                             capsys):
    from indexer.cli import main

    # 64 escrows: more than a chunk (50), so the pass after the load runs in worker processes
    path = write_lines(tmp_path / "w.ndjson", generate(seed=9, escrows=32, inferences=4))
    victim = sorted({line["escrow_id"] for line in _records(path) if line["kind"] == "escrow"})[40]
    monkeypatch.setattr(run, "replay_rows", _dying({victim}))
    assert main(["--database-url", db_url, "ingest", "--no-progress", str(path)]) == 1
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert f"1 escrow(s) kill their replay process even alone and were left dirty: {victim}" in err
    assert _dirty(db_url) == [victim]
    with psycopg.connect(db_url) as conn:  # every other escrow's epoch was evaluated by the rules stage
        assert conn.execute("SELECT count(*) FROM rules.dirty_epoch").fetchone()[0] == 0
    monkeypatch.undo()
    assert main(["--database-url", db_url, "replay"]) == 0
    assert _dirty(db_url) == []


def _records(path: Path) -> list[dict]:
    import orjson
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]

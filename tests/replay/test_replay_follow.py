"""The replay that follows a long load (indexer.replay.follow): the same tables as load-then-replay, across an
epoch boundary (the loader makes partitions while chunks replay), with a follower killed mid-load, and the hold that
keeps it off the escrows the newest batch touched."""
from __future__ import annotations

import logging
import time

import psycopg

from indexer.db.claims import claim
from indexer.load.ingest import ingest_paths
from indexer.downstream import process_changes
from indexer.replay.follow import ReplayFollower
from indexer.synth import generate
from tests.support.helpers import table_snapshot, write_lines

REPLAYED = ["replay.inference", "replay.vote", "replay.slot_stats", "replay.escrow", "replay.rejected_tx"]


def _corpus(tmp_path):
    # two epochs, so the load creates the second epoch's partitions while the follower replays the first's escrows
    return write_lines(tmp_path / "c.ndjson", generate(seed=11, escrows=6, inferences=60, epochs=2))


def _serial(url: str, path) -> dict:
    ingest_paths(url, [str(path)], batch_lines=97)
    with psycopg.connect(url) as conn:
        process_changes(conn, url)
    return table_snapshot(url, REPLAYED)


def _followed(url: str, path, on_batch=None):
    with ReplayFollower(url, after_lines=1) as follower:
        def batch(lines, escrows):
            follower.batch(lines, escrows)
            if on_batch:
                on_batch(follower)
        ingest_paths(url, [str(path)], batch_lines=97, on_batch=batch)
        replayed = follower.finish(catch_up=True)
    with psycopg.connect(url) as conn:
        downstream = process_changes(conn, url, replayed=replayed)
    return replayed, downstream


def test_follower_ends_with_the_tables_of_load_then_replay(db_url, second_db_url, tmp_path, caplog):
    path = _corpus(tmp_path)
    want = _serial(second_db_url, path)
    with caplog.at_level(logging.WARNING):
        replayed, downstream = _followed(db_url, path)
    assert replayed.escrows > 0, "the follower replayed nothing during the load"
    assert downstream.replay.escrows >= replayed.escrows  # the summary counts the follower's work too
    assert downstream.replay.seconds >= replayed.seconds > 0  # and the time its end was waited for
    assert table_snapshot(db_url, REPLAYED) == want
    assert not [r for r in caplog.records if "deadlock" in r.getMessage()], "the loader and the follower deadlocked"
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone()[0] == 0


def test_a_killed_follower_loses_nothing(db_url, second_db_url, tmp_path, caplog):
    path = _corpus(tmp_path)
    want = _serial(second_db_url, path)
    killed = []

    def kill_once(follower):
        if follower._proc is not None and not killed:
            follower._proc.kill()  # SIGKILL, maybe mid-chunk: its chunk's claims roll back
            follower._proc.join()
            killed.append(follower._proc.exitcode)

    with caplog.at_level(logging.WARNING):
        replayed, _ = _followed(db_url, path, on_batch=kill_once)
    assert killed == [-9]
    assert replayed.escrows == 0  # nothing came back from it
    assert any("replay follower ended without a result" in r.getMessage() for r in caplog.records)
    assert table_snapshot(db_url, REPLAYED) == want


def _api_views(url: str) -> dict[str, list]:
    """Every api view's rows, sorted, without its time columns (when a row was evaluated)."""
    with psycopg.connect(url) as c:
        views = [r[0] for r in c.execute("SELECT table_name FROM information_schema.views "
                                         "WHERE table_schema = 'api' ORDER BY 1")]
        out = {}
        for view in views:
            cols = [r[0] for r in c.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'api' AND table_name = %s "
                "AND data_type NOT LIKE 'timestamp%%' ORDER BY ordinal_position", (view,))]
            order = ", ".join(str(i + 1) for i in range(len(cols)))
            out[view] = c.execute(f"SELECT {', '.join(cols)} FROM api.{view} ORDER BY {order}").fetchall()
    return out


def _dirty(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT escrow_id FROM replay.dirty_escrow ORDER BY 1")]


def test_a_short_load_replays_after_it_in_the_follower(db_url, second_db_url, tmp_path):
    """Under FOLLOW_AFTER_LINES the follower replays nothing while the load runs (load, then replay, as ever), but
    it is started and connected by then, and replays the remainder (one chunk at most) once told the load is over
    (wind_down), while the caller goes on: the pass after it waits for its summary (finish), finds nothing dirty
    and starts no process. Every table and api view is as after load-then-replay."""
    path = write_lines(tmp_path / "s.ndjson", generate(seed=3, escrows=2, inferences=10, epochs=1))
    _serial(second_db_url, path)
    with ReplayFollower(db_url) as follower:  # the default threshold: 100,000 lines
        ingest_paths(db_url, [str(path)], on_batch=follower.batch)
        assert follower._proc is not None and len(_dirty(db_url)) == 2  # started, and nothing replayed yet
        follower.wind_down()
        deadline = time.monotonic() + 60
        while _dirty(db_url) and time.monotonic() < deadline:  # another process's work: polled, with a deadline
            time.sleep(0.01)
        assert _dirty(db_url) == [], "the follower did not replay the remainder before finish() was called"
        with psycopg.connect(db_url) as conn:
            downstream = process_changes(conn, db_url, replayed=follower.finish)
    assert downstream.replay.escrows == 2 and downstream.rules.epochs == 1
    assert table_snapshot(db_url, REPLAYED) == table_snapshot(second_db_url, REPLAYED)
    assert _api_views(db_url) == _api_views(second_db_url)


def test_a_remainder_over_one_chunk_is_left_to_the_pass(db_url, second_db_url, tmp_path):
    """The pass after the load replays more than a chunk with several processes: the follower leaves it there."""
    path = write_lines(tmp_path / "s.ndjson", generate(seed=3, escrows=3, inferences=10, epochs=1))
    want = _serial(second_db_url, path)
    with ReplayFollower(db_url, chunk=2) as follower:
        ingest_paths(db_url, [str(path)], on_batch=follower.batch)
        assert follower.finish().escrows == 0
    assert len(_dirty(db_url)) == 3
    with psycopg.connect(db_url) as conn:
        assert process_changes(conn, db_url).replay.escrows == 3
    assert table_snapshot(db_url, REPLAYED) == want


def test_an_escrow_that_kills_the_follower_in_the_remainder_is_held_by_the_pass(db_url, second_db_url, tmp_path,
                                                                               monkeypatch, caplog):
    """The remainder runs in the follower's process, not the command's: an escrow whose replay kills it costs the
    follower, and the pass after the load replays the rest and holds that escrow, as it would have alone."""
    from indexer.replay import run
    from tests.support import worker_crash

    path = write_lines(tmp_path / "s.ndjson", generate(seed=3, escrows=2, inferences=10, epochs=1))
    _serial(second_db_url, path)
    with psycopg.connect(second_db_url) as conn:
        victim = conn.execute("SELECT min(escrow_id) FROM rec.escrow").fetchone()[0]
    real = run.replay_rows

    def replay_rows(config, rows, **kw):
        if config.escrow_id == victim:
            worker_crash.die()
        return real(config, rows, **kw)

    monkeypatch.setattr(run, "replay_rows", replay_rows)  # the follower and the pass's workers are forked
    with caplog.at_level(logging.WARNING), ReplayFollower(db_url) as follower:
        ingest_paths(db_url, [str(path)], on_batch=follower.batch)
        replayed = follower.finish()
    assert replayed.escrows == 0
    assert any("replay follower ended without a result" in r.getMessage() for r in caplog.records)
    with psycopg.connect(db_url) as conn:
        downstream = process_changes(conn, db_url, replayed=replayed)
    assert downstream.replay.held == [victim] and _dirty(db_url) == [victim]
    monkeypatch.undo()
    with psycopg.connect(db_url) as conn:
        assert process_changes(conn, db_url).replay.held == []
    assert table_snapshot(db_url, REPLAYED) == table_snapshot(second_db_url, REPLAYED)


def test_a_remainder_that_fails_is_left_to_the_pass_and_the_follower_still_reports(db_url, second_db_url, tmp_path,
                                                                                    monkeypatch):
    """An error in the remainder (not a death): that chunk rolls back and stays dirty, and what the follower
    replayed during the load is still reported and counted; the pass after the load replays the rest."""
    from indexer.replay import run

    path = _corpus(tmp_path)
    want = _serial(second_db_url, path)
    with psycopg.connect(second_db_url) as conn:  # the file's last escrow: in the last batch, held for the remainder
        last = conn.execute("SELECT max(escrow_id) FROM rec.escrow").fetchone()[0]
    real = run.replay_rows

    def replay_rows(config, rows, **kw):
        if config.escrow_id == last:
            raise RuntimeError("a bad escrow")
        return real(config, rows, **kw)

    monkeypatch.setattr(run, "replay_rows", replay_rows)  # the follower is forked: it replays with this
    with ReplayFollower(db_url, after_lines=1) as follower:
        ingest_paths(db_url, [str(path)], batch_lines=97, on_batch=follower.batch)
        replayed = follower.finish()
    assert replayed.escrows > 0 and last in _dirty(db_url)
    monkeypatch.undo()
    with psycopg.connect(db_url) as conn:
        downstream = process_changes(conn, db_url, replayed=replayed)
    assert downstream.replay.escrows == 12 and _dirty(db_url) == []
    assert table_snapshot(db_url, REPLAYED) == want


def test_claim_leaves_held_keys_dirty(conn):
    conn.execute("INSERT INTO replay.dirty_escrow (escrow_id) VALUES ('1'), ('2'), ('3')")
    assert claim(conn, "replay.dirty_escrow", "escrow_id", 10, ["2"]) == ["1", "3"]
    assert [r[0] for r in conn.execute("SELECT escrow_id FROM replay.dirty_escrow")] == ["2"]


def test_a_pass_reads_the_hold_at_every_claim(conn):
    """The follower changes its hold as batches come (in place, between chunks): the next claim must see it."""
    from indexer.replay.run import ReplaySummary, replay_loop

    conn.execute("INSERT INTO replay.dirty_escrow (escrow_id) VALUES ('1'), ('2'), ('3'), ('4')")
    hold: list = []

    def next_batch_named_3() -> bool:
        hold[:] = ["3"]
        return False

    replay_loop(conn, 1, ReplaySummary(), hold=hold, stop=next_batch_named_3)
    assert [r[0] for r in conn.execute("SELECT escrow_id FROM replay.dirty_escrow")] == ["3"]


def test_the_loader_names_a_batch_before_it_commits(db_url, tmp_path):
    """The follower must hold a batch's escrows before their dirty marks are visible, or it may claim one the batch
    is about to mark again (the loader's mark then waits for the follower's chunk)."""
    path = write_lines(tmp_path / "b.ndjson", generate(seed=4, escrows=4, inferences=30, epochs=1))
    seen = []
    with psycopg.connect(db_url, autocommit=True) as other:
        def batch(lines, escrows):
            dirty = other.execute("SELECT count(*) FROM replay.dirty_escrow WHERE escrow_id = ANY(%s)",
                                  (sorted(escrows),)).fetchone()[0]
            seen.append((len(escrows), dirty))

        ingest_paths(db_url, [str(path)], batch_lines=97, on_batch=batch)
    assert len(seen) > 3 and all(n > 0 for n, _ in seen) and any(n > 1 for n, _ in seen)
    # an escrow a batch continues was marked by the batch before: only those may be dirty yet, never all of them
    assert all(dirty < n for n, dirty in seen if n > 1)

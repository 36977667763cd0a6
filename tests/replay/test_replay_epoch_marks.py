"""Two replay processes on escrows of one epoch do not wait for each other's whole chunk: a chunk marks its epoch
for the rules stage as its last write (indexer.replay.run._MARK_EPOCHS), so the epoch mark's row lock is held from
then to the commit, not for the whole replay."""
from __future__ import annotations

import psycopg

from indexer.load.ingest import ingest_paths
from indexer.replay import run
from indexer.replay.run import ReplaySummary, replay_chunk
from tests.support.helpers import escrow, tx, write_lines


def _start(i, eid):
    return tx("start", i, i, escrow_id=eid, prompt_hash="ab" * 32, model="m", input_length=10, max_tokens=5,
              started_at=1_790_000_000)


def test_a_chunk_of_the_same_epoch_replays_while_another_is_open(db_url, tmp_path, monkeypatch):
    path = write_lines(tmp_path / "two.ndjson", [escrow("1971"), escrow("1972"), _start(1, "1971"), _start(2, "1972")])
    ingest_paths(db_url, [str(path)])  # load only: both escrows dirty, both in epoch 408
    verify, inside = run.verify_escrows, {}

    def verify_then_replay_the_other(conn, part):
        # the first chunk (1971) has written its rows and not committed: the other process replays 1972 meanwhile
        if part == ["1971"]:
            with psycopg.connect(db_url) as other:
                other.execute("SET lock_timeout = '10s'")  # a wait on the first chunk's locks fails the test
                other.commit()
                inside["other"] = ReplaySummary()
                assert replay_chunk(other, 50, inside["other"], only=["1972"])
        return verify(conn, part)

    monkeypatch.setattr(run, "verify_escrows", verify_then_replay_the_other)
    with psycopg.connect(db_url) as first:
        first_summary = ReplaySummary()
        assert replay_chunk(first, 50, first_summary, only=["1971"])
    assert (first_summary.escrows, inside["other"].escrows) == (1, 1)
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT escrow_id, epoch_index FROM replay.escrow ORDER BY 1").fetchall() == [
            ("1971", 408), ("1972", 408)]
        # both chunks' marks for the rules stage are there: the epoch and each escrow
        assert c.execute("SELECT epoch_index FROM rules.dirty_epoch").fetchall() == [(408,)]
        assert c.execute("SELECT escrow_id, epoch_index FROM rules.dirty_escrow ORDER BY 1").fetchall() == [
            ("1971", 408), ("1972", 408)]
        assert c.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone()[0] == 0

"""A replay chunk and a loader's batch take the dirty marks in one order (indexer.db.lockorder): the chunk holds its
escrows' marks (its claim) and then marks their epochs; a batch marks its escrows, then its epochs. A batch that
marked an epoch first and then waited for an escrow the chunk had claimed, while the chunk waited for the epoch,
would deadlock. And a chunk that the server does cancel as a deadlock victim is rolled back and
replayed again. Deterministic: gates hold each side until the other waits, and the side that would be cancelled
closes the cycle with the short deadlock_timeout (tests/support/locks.py)."""
from __future__ import annotations

import logging

import psycopg
import pytest

from indexer.db.deadlocks import ATTEMPTS as DEADLOCK_ATTEMPTS
from indexer.load.ingest import ingest_file
from indexer.replay.run import ReplaySummary, replay_chunk
from indexer.sources.ndjson import open_input
from tests.support.helpers import escrow, ingest, tx, write_lines
from tests.support.locks import Background, inject_deadlocks, never_the_victim, the_victim, waits_on_a_lock

EPOCH = 408
PARAMS = {"kind": "epoch_params", "epoch_index": EPOCH, "devshard_escrow_params": {"max_nonce": 1000},
          "params_height": 100, "params_exact": False}
MODEL = {"kind": "model_snapshot", "epoch_index": EPOCH, "model_id": "m", "model_args": ["--max-model-len", "4096"]}
# Batches that dirty epoch 408 and the escrows of it: each kind marks the epoch for the rules and, as verification
# reads it, the epoch's escrows for the replay
BATCHES = {
    # a new record: the plain insert path, its marks taken as the batch ends
    "new warm-key grant": [{"kind": "warm_key", "epoch_index": EPOCH, "participant": "gonka1hostA",
                            "grantee": "gonka1warm"}],
    # amendments: the upsert path, one statement a kind in load order (the model first: it marks the epoch only)
    "amended model and params": [{**MODEL, "model_args": ["--max-model-len", "8192"]},
                                 {**PARAMS, "devshard_escrow_params": {"max_nonce": 2000}, "params_height": 101}],
}


def _start(escrow_id: str) -> dict:
    return tx("start", 1, 1, escrow_id=escrow_id, prompt_hash="ab" * 32, model="m", input_length=10, max_tokens=5,
              started_at=1_790_000_000)


def _dirty(url: str, tmp_path) -> None:
    """Escrow 1971 of epoch 408, replayed once, with its epoch's params and model; then a late record marks it
    dirty."""
    ingest(url, write_lines(tmp_path / "base.ndjson", [escrow("1971"), PARAMS, MODEL]))
    ingest_file_on(url, write_lines(tmp_path / "late.ndjson", [_start("1971")]))


def ingest_file_on(url: str, path, conn: psycopg.Connection | None = None):
    """Load one file (no replay) on ``conn``, or on a connection of its own."""
    if conn is not None:
        return ingest_file(conn, open_input(str(path)))
    with psycopg.connect(url) as own:
        return ingest_file(own, open_input(str(path)))


def _marks(url: str) -> tuple[list, list]:
    with psycopg.connect(url) as c:
        return (c.execute("SELECT escrow_id FROM replay.dirty_escrow ORDER BY 1").fetchall(),
                c.execute("SELECT epoch_index, whole FROM rules.dirty_epoch ORDER BY 1").fetchall())


@pytest.mark.parametrize("name", BATCHES)
def test_a_batch_changing_an_epoch_waits_for_a_chunk_of_its_escrows_without_deadlock(db_url, tmp_path, caplog,
                                                                                      name):
    _dirty(db_url, tmp_path)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("DELETE FROM rules.dirty_epoch")
    batch = write_lines(tmp_path / "batch.ndjson", BATCHES[name])
    gate, loader, replayer = (psycopg.connect(db_url) for _ in range(3))
    never_the_victim(loader)
    the_victim(replayer)
    gate.execute("LOCK TABLE replay.rejected_tx IN ACCESS EXCLUSIVE MODE")  # the chunk stops after its claim
    replayed = ReplaySummary()
    try:
        with caplog.at_level(logging.WARNING, logger="indexer.db.deadlocks"):
            chunk = Background(lambda: replay_chunk(replayer, 50, replayed))
            waits_on_a_lock(db_url, replayer.info.backend_pid)
            load = Background(lambda: ingest_file_on(db_url, batch, loader))
            waits_on_a_lock(db_url, loader.info.backend_pid)  # for the mark of escrow 1971, which the chunk holds
            gate.rollback()  # the chunk goes on and marks epoch 408
            assert chunk.result() is True
            loaded = load.result()
    finally:
        for c in (gate, loader, replayer):
            c.close()
    assert [r.getMessage() for r in caplog.records] == []  # no deadlock, not one broken and retried
    assert replayed.escrows == 1 and loaded.loaded + loaded.amended == len(BATCHES[name])
    # the chunk's marks, then the batch's: the escrow again (its verification inputs changed), the epoch whole
    assert _marks(db_url) == ([("1971",)], [(EPOCH, True)])


def test_a_chunk_cancelled_as_a_deadlock_victim_is_replayed_again(db_url, tmp_path, caplog):
    _dirty(db_url, tmp_path)
    gate, other, replayer = (psycopg.connect(db_url) for _ in range(3))
    never_the_victim(other)
    the_victim(replayer)
    # the other side holds what the chunk rewrites last (replay.escrow); the gate stops the chunk just before
    other.execute("LOCK TABLE replay.escrow IN SHARE MODE")
    gate.execute("LOCK TABLE replay.rejected_tx IN ACCESS EXCLUSIVE MODE")
    replayed, claimed = ReplaySummary(), []
    try:
        with caplog.at_level(logging.WARNING, logger="indexer.db.deadlocks"):
            chunk = Background(lambda: replay_chunk(replayer, 50, replayed, on_claim=claimed.append))
            waits_on_a_lock(db_url, replayer.info.backend_pid)
            # the other side waits for a table the chunk holds (replay.inference), then the chunk for the other
            wants = Background(lambda: other.execute("LOCK TABLE replay.inference IN SHARE MODE"))
            waits_on_a_lock(db_url, other.info.backend_pid)
            gate.rollback()
            wants.result()  # the chunk was cancelled, its locks and claim rolled back: the other side has its lock
            other.rollback()  # the chunk's second try waited for it
            assert chunk.result() is True
    finally:
        for c in (gate, other, replayer):
            c.close()
    assert [r.getMessage() for r in caplog.records] == [
        "replay chunk: cancelled as a deadlock victim, trying again (2 of 5)"]
    assert claimed == [["1971"], ["1971"]]  # claimed again after the rollback ...
    assert (replayed.escrows, replayed.txs) == (1, 1)  # ... and counted once
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT escrow_id, tx_count FROM replay.escrow").fetchall() == [("1971", 1)]
    assert _marks(db_url)[0] == []


def test_a_chunk_that_keeps_deadlocking_fails_and_leaves_its_escrows_dirty(db_url, tmp_path, caplog):
    _dirty(db_url, tmp_path)
    inject_deadlocks(db_url, "rules.dirty_escrow", DEADLOCK_ATTEMPTS)  # the chunk's last write
    with caplog.at_level(logging.WARNING, logger="indexer.db.deadlocks"), psycopg.connect(db_url) as replayer:
        with pytest.raises(psycopg.errors.DeadlockDetected):
            replay_chunk(replayer, 50, ReplaySummary())
    assert len(caplog.records) == DEADLOCK_ATTEMPTS - 1
    assert _marks(db_url)[0] == [("1971",)]  # still dirty, for the next pass
    with psycopg.connect(db_url) as c:  # the first replay's rows, untouched
        assert c.execute("SELECT escrow_id, tx_count FROM replay.escrow").fetchall() == [("1971", 0)]

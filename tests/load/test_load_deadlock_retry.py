"""A batch the server cancels as a deadlock victim (two loaders, one creating an epoch's partitions while the other's
batch reads their parents) is rolled back whole and tried again: the load ends with exactly a clean load's rows,
no line twice, none missing. The deadlock is raised by the server itself, from a trigger on the resume-cursor
update every batch makes, for the first attempts only (a sequence counts them: it is not rolled back)."""
from __future__ import annotations

import psycopg
import pytest

from indexer.db.deadlocks import ATTEMPTS as DEADLOCK_ATTEMPTS
from indexer.synth import generate
from tests.support.helpers import db_state, ingest, write_lines

TRIGGER = """
CREATE SEQUENCE test_deadlocks;
CREATE FUNCTION test_deadlock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('test_deadlocks') <= %(times)s THEN
    RAISE EXCEPTION 'deadlock detected (injected by the test)' USING ERRCODE = 'deadlock_detected';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER test_deadlock BEFORE UPDATE OF lines_committed ON rec.source
  FOR EACH ROW EXECUTE FUNCTION test_deadlock();
"""


def _records(tmp_path):
    records = list(generate(seed=5, escrows=4, inferences=30, epochs=2))
    # a Finish naming a slot its escrow does not have, in the first batch (the one the deadlocks hit):
    # quarantined by that batch's slot check
    at, escrow = next((i, r) for i, r in enumerate(records) if r["kind"] == "escrow")
    records.insert(at + 1, {"kind": "finish", "escrow_id": escrow["escrow_id"], "inference_id": 10**6, "diff_nonce": 10**6,
                    "executor_slot": len(escrow["slots"]), "input_tokens": 1, "output_tokens": 1})
    return write_lines(tmp_path / "in.ndjson", records)


def test_a_deadlocked_batch_is_tried_again_and_loads_once(db_url, second_db_url, tmp_path):
    path = _records(tmp_path)
    clean = ingest(second_db_url, path)  # the clean load
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(TRIGGER % {"times": DEADLOCK_ATTEMPTS - 1})
    summary = ingest(db_url, path, batch_lines=40)
    assert summary.quarantined == clean.quarantined == 1  # the slot check of a batch tried again: counted once
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT last_value FROM test_deadlocks").fetchone()[0] >= DEADLOCK_ATTEMPTS - 1
        assert c.execute("SELECT lines_committed, completed_at IS NOT NULL FROM rec.source").fetchone() == (
            summary.lines, True)
    tables = ["rec.escrow", "rec.start_tx", "rec.finish_tx", "rec.validation_tx", "rec.quarantine", "replay.inference"]
    assert db_state(db_url, tables=tables) == db_state(second_db_url, tables=tables)


def test_a_batch_that_keeps_deadlocking_fails_naming_it(db_url, tmp_path):
    path = _records(tmp_path)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(TRIGGER % {"times": DEADLOCK_ATTEMPTS})
    with pytest.raises(psycopg.errors.DeadlockDetected):
        ingest(db_url, path, batch_lines=40)
    with psycopg.connect(db_url) as c:  # nothing of the failed batch stayed
        assert c.execute("SELECT count(*) FROM rec.start_tx").fetchone()[0] == 0

"""A poller's commit (indexer.poller.store.Store.commit: records, cursors and queued rows in one transaction) when
that transaction does not commit.

* A deadlock victim (two pollers making the same epoch's partitions inside their commits) is run again whole and
  ends as a clean commit does. The deadlock is raised by the server, from a trigger on the resume-cursor update
  each loaded source makes, for the first attempts only (a sequence counts them: it is not rolled back).
* Any other failure rolls back the partitions the commit made with everything else; the next commit of that epoch
  must make them again, not write the epoch's rows into the DEFAULT partition because it remembers them made.
"""
from __future__ import annotations

import orjson
import psycopg
import pytest

from indexer.db.deadlocks import ATTEMPTS as DEADLOCK_ATTEMPTS
from indexer.poller.store import Store
from indexer.synth import generate
from tests.support.helpers import db_state
from tests.load.test_load_deadlock_retry import TRIGGER

TABLES = ["rec.escrow", "rec.start_tx", "rec.finish_tx", "rec.validation_tx", "rec.quarantine"]


def _lines(seed: int = 5) -> list[bytes]:
    return [orjson.dumps(r) for r in generate(seed=seed, escrows=3, inferences=20, epochs=1)]


def _commit(url: str, lines: list[bytes], after=None) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        store = Store(conn, archive=False)
        store.commit(store.prepare([(lines, "devnet://escrows")]), {"escrow:all": "7"}, after=after)


def test_a_commit_chosen_as_deadlock_victim_runs_again_and_ends_as_a_clean_one(db_url, second_db_url):
    lines = _lines()
    _commit(second_db_url, lines)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(TRIGGER % {"times": DEADLOCK_ATTEMPTS - 1})
    _commit(db_url, lines)
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT last_value FROM test_deadlocks").fetchone()[0] >= DEADLOCK_ATTEMPTS - 1
    assert db_state(db_url, tables=TABLES) == db_state(second_db_url, tables=TABLES)
    assert _cursors(db_url) == _cursors(second_db_url) == [("escrow:all", "7")]


def _cursors(url: str) -> list[tuple]:
    with psycopg.connect(url) as c:
        return c.execute("SELECT source, cursor FROM net.cursor ORDER BY 1").fetchall()


def test_a_commit_that_keeps_deadlocking_fails_and_writes_nothing(db_url):
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(TRIGGER % {"times": DEADLOCK_ATTEMPTS})
    with pytest.raises(psycopg.errors.DeadlockDetected):
        _commit(db_url, _lines())
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM rec.start_tx").fetchone()[0] == 0
    assert _cursors(db_url) == []


def _where(url: str) -> dict[str, int]:
    with psycopg.connect(url) as c:
        return dict(c.execute("SELECT tableoid::regclass::text, count(*) FROM rec.start_tx GROUP BY 1").fetchall())


def test_partitions_made_in_a_rolled_back_commit_are_made_again_by_the_next(db_url):
    lines = _lines()
    epoch = next(orjson.loads(line)["epoch_index"] for line in lines if b'"kind":"escrow"' in line)

    def fail(conn):
        raise RuntimeError("the cycle's last step failed")

    with psycopg.connect(db_url, autocommit=True) as conn:
        store = Store(conn, archive=False)
        with pytest.raises(RuntimeError, match="last step failed"):
            store.commit(store.prepare([(lines, "devnet://escrows")]), {"escrow:all": "7"}, after=fail)
        assert _where(db_url) == {}
        with psycopg.connect(db_url) as c:  # gone with the transaction that made them
            assert c.execute("SELECT to_regclass(%s)", (f"part.rec_start_tx_e{epoch}",)).fetchone()[0] is None
        store.commit(store.prepare([(lines, "devnet://escrows")]), {"escrow:all": "7"})  # the same Store again
    starts = sum(1 for line in lines if b'"kind":"start"' in line)
    assert _where(db_url) == {f"part.rec_start_tx_e{epoch}": starts}

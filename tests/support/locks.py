"""Deterministic lock interleavings for the deadlock tests: wait until a backend waits on a lock (the server is
another process, so this polls it, with a deadline), and choose which side of a cycle the server cancels.

The server checks for a deadlock once per lock wait, ``deadlock_timeout`` after the wait starts, and cancels the
backend whose check finds the cycle. A side that waits first with a long timeout never finds one; the side that
closes the cycle, with a short timeout, does: it is the victim, whatever the machine's speed.
"""
from __future__ import annotations

import threading
import time

import psycopg


def waits_on_a_lock(url: str, pid: int | None = None, seconds: float = 60) -> None:
    """Return once backend ``pid`` (any backend of the database with None) waits on a lock; fail after ``seconds``
    (the server is another process: polled, with a deadline)."""
    deadline = time.monotonic() + seconds
    with psycopg.connect(url, autocommit=True) as c:
        while not c.execute("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                            "(pid = %s OR %s::int IS NULL AND datname = current_database())", (pid, pid)).fetchone():
            assert time.monotonic() < deadline, f"{'backend %d' % pid if pid else 'no backend'} never waited on a lock"
            time.sleep(0.01)


def deadlock_timeout(conn: psycopg.Connection, value: str) -> None:
    """This session's deadlock_timeout (committed when the connection is not in autocommit)."""
    conn.execute("SELECT set_config('deadlock_timeout', %s, false)", (value,))
    if not conn.autocommit:
        conn.commit()


def never_the_victim(conn: psycopg.Connection) -> None:
    deadlock_timeout(conn, "1h")


def the_victim(conn: psycopg.Connection) -> None:
    deadlock_timeout(conn, "10ms")


class Background:
    """``work()`` in a thread; ``result()`` joins it and returns its value or raises its exception."""

    def __init__(self, work):
        self._out: dict = {}
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()

    def _run(self, work) -> None:
        try:
            self._out["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to result()
            self._out["error"] = exc

    def result(self, seconds: float = 120):
        self._thread.join(seconds)
        assert not self._thread.is_alive(), "the background work never ended"
        if "error" in self._out:
            raise self._out["error"]
        return self._out.get("value")


_INJECT = """
CREATE SEQUENCE test_deadlocks;
CREATE FUNCTION test_deadlock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('test_deadlocks') <= {times} THEN
    RAISE EXCEPTION 'deadlock detected (injected by the test)' USING ERRCODE = 'deadlock_detected';
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER test_deadlock BEFORE INSERT ON {table} FOR EACH STATEMENT EXECUTE FUNCTION test_deadlock();
"""


def inject_deadlocks(url: str, table: str, times: int) -> None:
    """The first ``times`` statements inserting into ``table`` fail as deadlock victims, raised by the server
    itself (a sequence counts them: it is not rolled back with the cancelled transaction)."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(_INJECT.format(times=int(times), table=table))


def fixture_with_its_epoch_dirty(db_url: str, tmp_path) -> None:
    """The v4.1 release fixture loaded and evaluated, then its epoch marked for a whole re-evaluation: a rules claim
    for the deadlock tests to take."""
    from tests.support.helpers import ingest, write_lines
    from tests.support.verify_records import EPOCH, records

    ingest(db_url, write_lines(tmp_path / "in.ndjson", records()), rules=True)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("INSERT INTO rules.dirty_epoch (epoch_index, whole) VALUES (%s, true) "
                  "ON CONFLICT (epoch_index) DO UPDATE SET whole = true", (EPOCH,))

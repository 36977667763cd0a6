"""A poll cycle's commits do not wait for the WAL flush; its last commit does (indexer.db.durability).

The test server runs with ``synchronous_commit = off`` for speed, so each connection here asks for ``on`` itself,
as a production server's default would give it: the poller must turn it off for its own commits, keep it for
the cycle's last, and leave the session's default untouched elsewhere.
"""
from __future__ import annotations

import psycopg

from indexer.poller.leases import Leases
from indexer.poller.store import Store

DURABLE = "-c synchronous_commit=on"


def _setting(conn: psycopg.Connection) -> str:
    return conn.execute("SHOW synchronous_commit").fetchone()[0]


def test_the_cycle_commits_without_waiting_and_its_end_waits_for_all(db_url):
    with psycopg.connect(db_url, autocommit=True, options=DURABLE) as conn:
        store = Store(conn, archive=False, side_url=db_url)
        assert store.durable == "on"
        assert _setting(conn) == "off"
        assert _setting(store._side_conn()) == "off"
        seen = []
        flush = store._flush

        def inside(c):  # the last thing finish_cycle's transaction runs before it commits
            seen.append(_setting(c))
            return flush(c)

        store._flush = inside
        store.finish_cycle(db_url, None)
        assert seen == ["on"]           # the cycle's last commit waited for the flush (and so for all before it)
        assert _setting(conn) == "off"  # for that transaction only
        store.close()


def test_a_failed_cycle_is_recorded_durably_too(db_url):
    with psycopg.connect(db_url, autocommit=True, options=DURABLE) as conn:
        store = Store(conn, archive=False)
        assert _setting(conn) == "off"
        seen = []
        flush = store._flush
        store._flush = lambda c: (seen.append(_setting(c)), flush(c))[1]
        store.finish_cycle(db_url, "RuntimeError: boom")
        assert seen == ["on"]
        row = conn.execute("SELECT last_error FROM net.cursor WHERE source = 'chain'").fetchone()
        assert row == ("RuntimeError: boom",)


def test_leases_commit_without_waiting(db_url):
    leases = Leases(db_url + ("&" if "?" in db_url else "?") + "options=-c%20synchronous_commit%3Don").start()
    try:
        assert _setting(leases._conn) == "off"
        assert leases.take("escrow:1").outcome == "taken"
    finally:
        leases.close()

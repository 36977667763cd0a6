"""The database drops the poller's lease connection (the one its fetch threads take, look at and release leases on)
in the middle of a cycle: ``pg_terminate_backend`` from another connection, as a server restart, an idle-session
timeout or a proxy in between would. The lease statements are opened again on a new connection and the cycle goes on
to a clean run's rows, instead of failing and leaving its own leases to expire under the next cycle."""
from __future__ import annotations

import psycopg
import pytest

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.poller import poll_once
from indexer.poller.leases import Leases
from indexer.sources.gonka import RetryPolicy
from tests.support.helpers import LOAD_TIMES, db_state

FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=8)


def _drop_lease_connection(url: str, leases: Leases) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(%s, 5000)", (leases._conn.info.backend_pid,))  # waits until gone


@pytest.mark.parametrize("at", ["take", "escrow_cursors", "release", "close"])
def test_a_dropped_lease_connection_is_opened_again_and_the_cycle_goes_on(db_url, second_db_url, monkeypatch, at):
    scn = Scenario(ScenarioConfig(seed=17, epochs=2, escrows_per_epoch=2, inferences_per_escrow=16))
    original = getattr(Leases, at)
    calls = {"n": 0}

    def dropped_before(self, *args, **kw):
        calls["n"] += 1
        if calls["n"] == (1 if at == "close" else 3):
            _drop_lease_connection(db_url, self)
        return original(self, *args, **kw)

    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        clean = poll_once(second_db_url, net.chain_rest_url, net.rpc_url, policy=FAST, private_hosts=True)
        monkeypatch.setattr(Leases, at, dropped_before)
        summary = poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=FAST, private_hosts=True)
    assert calls["n"] >= (1 if at == "close" else 3)
    assert summary.escrows == clean.escrows == len(scn.escrows)
    with psycopg.connect(db_url) as c:  # everything it took is given back: the next cycle waits for nothing
        assert c.execute("SELECT count(*) FROM net.lease WHERE released_at IS NULL").fetchone()[0] == 0
    exclude = LOAD_TIMES | {"source_id", "source_line"}
    mine, theirs = db_state(db_url, exclude), db_state(second_db_url, exclude)
    for state in (mine, theirs):
        state.pop("rec.source"), state.pop("net.lease", None), state.pop("net.failure", None)
        state.pop("net.raw_response", None)
    assert mine == theirs


def test_a_lease_connection_that_cannot_be_opened_again_fails_the_statement_and_close_says_so(db_url, caplog):
    """Dropped, and the server unreachable when it is opened again: the statement raises (the cycle fails, as with
    any database failure); close() then gives nothing back, says so in one line and does not raise (the leases
    expire)."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"postgresql://nobody@127.0.0.1:{s.getsockname()[1]}/none"
    leases = Leases(db_url, seconds=30, holder="lonely:1:a").start()
    assert leases.take("escrow:1").outcome == "taken"
    _drop_lease_connection(db_url, leases)
    leases.url = dead
    with pytest.raises(psycopg.OperationalError):
        leases.take("escrow:2")
    with caplog.at_level("WARNING", logger="indexer.poller.leases"):
        leases.close()
    assert any("leases of lonely:1:a not given back" in r.getMessage() for r in caplog.records)
    with psycopg.connect(db_url) as c:  # left to expire
        assert c.execute("SELECT holder, released_at FROM net.lease WHERE resource = 'escrow:1'").fetchone() == \
            ("lonely:1:a", None)


def test_a_statement_that_fails_on_a_live_connection_is_not_run_again(db_url):
    """Only a dropped connection is opened again: a statement the server refused (here cancelled by a statement
    timeout) on a connection that is still up raises at once."""
    leases = Leases(db_url, seconds=30, holder="timed:1:a").start()
    try:
        leases._conn.execute("SET statement_timeout = 1")
        backend = leases._conn.info.backend_pid
        with pytest.raises(psycopg.errors.QueryCanceled):
            with leases._lock:
                leases._execute("SELECT pg_sleep(1)", None)
        assert leases._conn.info.backend_pid == backend and not leases._conn.broken
    finally:
        leases.close()


class _DropsAfterCommit:
    """The lease connection, dropped by the server right after its next take committed, before the answer arrives:
    the take ran, and the poller saw only the drop."""

    def __init__(self, url: str, conn: psycopg.Connection) -> None:
        self.url, self.conn = url, conn

    def __getattr__(self, name):
        return getattr(self.conn, name)

    def execute(self, query, params=None):
        out = self.conn.execute(query, params)
        if "INSERT INTO net.lease" not in query:
            return out
        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(%s, 5000)", (self.conn.info.backend_pid,))
        return self.conn.execute("SELECT 1")  # raises: the connection is gone


def test_a_takeover_run_again_on_a_reopened_connection_keeps_whom_it_was_taken_from(db_url):
    dead = Leases(db_url, seconds=30, holder="dead:1:a").start()
    assert dead.take("escrow:1").outcome == "taken"
    dead._stop.set()  # killed: nothing given back, the lease left to expire
    dead._conn.close()
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE net.lease SET expires_at = now() - interval '1 second' WHERE resource = 'escrow:1'")
    taker = Leases(db_url, seconds=30, holder="taker:2:b").start()
    try:
        taker._conn = _DropsAfterCommit(db_url, taker._conn)
        got = taker.take("escrow:1")
        assert not isinstance(taker._conn, _DropsAfterCommit)  # the take ran again on a new connection
        assert got.outcome == "taken" and got.taken_from == "dead:1:a"
        assert taker.takeovers == [("escrow:1", "dead:1:a")]
        # taken again while held: the takeover is the same one, not counted twice
        assert taker.take("escrow:1").outcome == "taken" and taker.takeovers == [("escrow:1", "dead:1:a")]
        with psycopg.connect(db_url) as c:
            assert c.execute("SELECT holder, takeovers, taken_from FROM net.lease WHERE resource = 'escrow:1'"
                             ).fetchone() == ("taker:2:b", 1, "dead:1:a")
    finally:
        taker.close()

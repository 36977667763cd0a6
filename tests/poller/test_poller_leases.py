"""Work leases on real PostgreSQL: take, renew, expire, take over, fence; and a poll cycle that waits for another
poller's lease, then takes it over once it expired (several pollers end to end: tests/poller/test_poller_shared.py).

Expiry is judged by the database clock; instead of waiting for it, most tests move ``expires_at`` into the past,
which is what the passing of time does."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.poller import poll_once
from indexer.poller.leases import LeaseLost, Leases
from indexer.poller.store import Store
from indexer.sources.gonka import RetryPolicy
from tests.support.helpers import LOAD_TIMES, db_state
from tests.support.locks import waits_on_a_lock

FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=8)


def _row(url: str, resource: str) -> dict | None:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT holder, released_at IS NOT NULL, takeovers, taken_from, expires_at > now(), "
                        "expires_at FROM net.lease WHERE resource = %s", (resource,)).fetchone()
    if row is None:
        return None
    return dict(zip(("holder", "released", "takeovers", "taken_from", "live", "expires_at"), row))


def _expire(url: str, resource: str) -> None:
    """What the passing of the lease's time does: expires_at falls behind the database clock."""
    with psycopg.connect(url) as c:
        c.execute("UPDATE net.lease SET expires_at = now() - interval '1 second' WHERE resource = %s", (resource,))


def _cursor(url: str, source: str) -> str | None:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT cursor FROM net.cursor WHERE source = %s", (source,)).fetchone()
    return row[0] if row else None


@pytest.fixture
def leases(db_url):
    opened: list[Leases] = []

    def start(holder: str, seconds: float = 30.0) -> Leases:
        opened.append(Leases(db_url, seconds=seconds, holder=holder).start())
        return opened[-1]

    yield start
    for lease in opened:
        lease.close()


def test_a_live_lease_is_exclusive_and_a_release_means_done(db_url, leases):
    a, b = leases("a"), leases("b")
    assert a.take("escrow:1").outcome == "taken"
    held = b.take("escrow:1")
    assert (held.outcome, held.holder) == ("held", "a")
    assert a.take("escrow:1").outcome == "taken"  # its own lease: renewed, not a second row
    a.release(["escrow:1"])
    assert _row(db_url, "escrow:1")["released"]
    # released after b's cycle began: a did that work during b's cycle, b must not do it again
    assert b.take("escrow:1").outcome == "done"
    assert b.status(["escrow:1"]) == {"escrow:1": "done"}
    # a poller starting after the release takes it (the next cycle's work): no takeover
    c = leases("c")
    took = c.take("escrow:1")
    assert (took.outcome, took.taken_from) == ("taken", None)
    row = _row(db_url, "escrow:1")
    assert (row["holder"], row["takeovers"], row["released"]) == ("c", 0, False)


def test_an_expired_lease_is_taken_over_and_the_stale_holder_cannot_commit(db_url, leases):
    a, b = leases("a"), leases("b")
    with psycopg.connect(db_url, autocommit=True) as conn:
        store = Store(conn, leases=a)
        assert a.take("escrow:7").outcome == "taken"
        store.commit([], {"escrow:7": "5"}, fence=["escrow:7"])
        assert _cursor(db_url, "escrow:7") == "5"

        assert b.take("escrow:7").outcome == "held"
        assert b.status(["escrow:7"]) == {"escrow:7": "held"}
        _expire(db_url, "escrow:7")  # a paused past its lease
        assert b.status(["escrow:7"]) == {"escrow:7": "free"}
        took = b.take("escrow:7")
        assert (took.outcome, took.taken_from) == ("taken", "a")
        assert b.takeovers == [("escrow:7", "a")]
        row = _row(db_url, "escrow:7")
        assert (row["holder"], row["takeovers"], row["taken_from"], row["live"]) == ("b", 1, "a", True)
        assert b.escrow_cursors("7") == (5, False)  # b resumes where a's last commit left it

        # a wakes up and commits what it fetched meanwhile: the fence rolls the whole transaction back
        with pytest.raises(LeaseLost, match="escrow:7 lost to b"):
            store.commit([], {"escrow:7": "9", "escrow-final:7": "9"}, fence=["escrow:7"])
    assert _cursor(db_url, "escrow:7") == "5"
    assert _cursor(db_url, "escrow-final:7") is None


def test_renewal_extends_only_what_is_still_held(db_url, leases):
    a, b = leases("a"), leases("b")
    a.take("escrow:1")
    a.take("epoch:3")
    before = _row(db_url, "escrow:1")["expires_at"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert a.renew(conn) == set()
        assert _row(db_url, "escrow:1")["expires_at"] > before
        _expire(db_url, "epoch:3")
        assert b.take("epoch:3").outcome == "taken"
        theirs = _row(db_url, "epoch:3")
        assert a.renew(conn) == {"epoch:3"}  # lost: reported, and b's lease is left alone
    assert _row(db_url, "epoch:3") == theirs


def test_a_long_commit_neither_holds_back_other_renewals_nor_ends_with_its_lease_expired(db_url, leases):
    """A commit locks the leases it is fenced by until it ends. The heartbeat renews the poller's other leases
    meanwhile (it skips the locked ones, which are not lost), and the commit ends with its own leases running a
    whole lease length: another poller takes over neither."""
    a, b = leases("a"), leases("b")
    a.take("escrow:1")
    a.take("escrow:2")
    seen: dict = {}

    def during_the_commit(conn: psycopg.Connection) -> None:
        # the commit ran past its lease: what the passing of time does to the row it has locked
        conn.execute("UPDATE net.lease SET expires_at = now() - interval '1 second' WHERE resource = 'escrow:1'")
        _expire(db_url, "escrow:2")  # and to the one it has not
        with psycopg.connect(db_url, autocommit=True) as beat:
            beat.execute("SET lock_timeout = '20s'")  # a renewal that waited for the commit would wait for ever
            seen["lost"] = a.renew(beat)
        seen["escrow:2"] = _row(db_url, "escrow:2")["live"]
        seen["b takes escrow:2"] = b.take("escrow:2").outcome

    with psycopg.connect(db_url, autocommit=True) as conn:
        Store(conn, leases=a).commit([], {"escrow:1": "5"}, after=during_the_commit, fence=["escrow:1"])
    assert seen == {"lost": set(), "escrow:2": True, "b takes escrow:2": "held"}
    row = _row(db_url, "escrow:1")
    assert (row["holder"], row["live"], row["takeovers"]) == ("a", True, 0)
    assert b.take("escrow:1").outcome == "held"


def test_a_take_waiting_for_another_pollers_commit_does_not_hold_back_the_renewal(db_url, leases):
    """Poller a asks for a lease whose row poller b's commit has locked: the take waits for that commit, and a's
    heartbeat goes on renewing what a holds meanwhile."""
    a, b = leases("a"), leases("b")
    a.take("escrow:1")
    b.take("escrow:2")
    seen: dict = {}
    taking = threading.Thread(target=lambda: seen.update(take=a.take("escrow:2").outcome))

    def during_bs_commit(conn: psycopg.Connection) -> None:
        taking.start()
        waits_on_a_lock(db_url, a._conn.info.backend_pid)
        renewing = threading.Thread(target=lambda: seen.update(lost=a.renew(beat)))
        with psycopg.connect(db_url, autocommit=True) as beat:
            renewing.start()
            renewing.join(timeout=30)
        seen["renewed while the take waited"] = not renewing.is_alive()
        seen["the take waited"] = taking.is_alive()

    with psycopg.connect(db_url, autocommit=True) as conn:
        Store(conn, leases=b).commit([], {"escrow:2": "3"}, after=during_bs_commit, fence=["escrow:2"])
    taking.join(timeout=30)
    assert seen == {"lost": set(), "renewed while the take waited": True, "the take waited": True, "take": "held"}


def test_the_heartbeat_keeps_a_short_lease_alive(db_url, leases):
    a = leases("a", seconds=0.3)  # renewed every 0.1 s
    a.take("escrow:1")
    first = _row(db_url, "escrow:1")["expires_at"]
    deadline = time.monotonic() + 20
    while _row(db_url, "escrow:1")["expires_at"] <= first:  # polls the database, which the heartbeat writes
        assert time.monotonic() < deadline, "the heartbeat never renewed the lease"
        time.sleep(0.01)
    assert _row(db_url, "escrow:1")["holder"] == "a"


def test_a_poller_without_progress_stops_renewing_so_its_leases_expire(db_url):
    a = Leases(db_url, seconds=0.3, holder="wedged", stall_seconds=1.0).start()
    try:
        a.take("escrow:1")  # progress; then nothing more (a wedged main thread, a live heartbeat thread)
        deadline = time.monotonic() + 20
        while _row(db_url, "escrow:1")["live"]:  # renewed for about a second, then left to expire
            assert time.monotonic() < deadline, "the heartbeat renewed a lease without progress"
            time.sleep(0.01)
        assert _row(db_url, "escrow:1")["holder"] == "wedged"
        a.touch()  # progress again: renewed again (no one had taken it over)
        while not _row(db_url, "escrow:1")["live"]:
            assert time.monotonic() < deadline, "the heartbeat did not resume"
            time.sleep(0.01)
    finally:
        a.close()


def test_close_releases_a_finished_cycle_and_abandons_a_failed_one(db_url, leases):
    b = leases("b")
    a = Leases(db_url, holder="a").start()
    a.take("escrow:1")
    a.take("escrow:2")
    a.release(["escrow:2"])
    a.close(failed=True)  # escrow:1 was not finished: others take it at once, as a takeover
    assert _row(db_url, "escrow:1")["released"] is False and _row(db_url, "escrow:1")["live"] is False
    assert b.take("escrow:1").taken_from == "a"
    assert b.take("escrow:2").outcome == "done"
    c = Leases(db_url, holder="c").start()
    c.take("escrow:3")
    c.close()
    assert _row(db_url, "escrow:3")["released"]


def _scenario() -> Scenario:
    return Scenario(ScenarioConfig(seed=17, epochs=2, escrows_per_epoch=2, inferences_per_escrow=16))


def _plant(url: str, resource: str, holder: str, seconds: float, released: bool = False) -> None:
    """A lease row as another poller leaves it (database clock)."""
    with psycopg.connect(url) as c:
        c.execute("INSERT INTO net.lease (resource, holder, expires_at, released_at) "
                  "VALUES (%s, %s, now() + make_interval(secs => %s), CASE WHEN %s THEN now() END)",
                  (resource, holder, seconds, released))


def test_a_cycle_waits_for_a_dead_pollers_leases_then_takes_them_over(db_url, second_db_url):
    scn = _scenario()
    epochs = [e.epoch_index for e in scn.epochs]
    escrows = sorted(scn.escrows, key=int)
    with DevnetServer(scn) as net:
        clean = poll_once(second_db_url, net.advance_to_last_epoch().chain_rest_url, net.rpc_url, policy=FAST,
                          private_hosts=True)
        # a poller that died holding the first epoch's chain work and an escrow: its leases run out in 1.5 s
        _plant(db_url, f"epoch:{epochs[0]}", "ghost:1:dead", 1.5)
        _plant(db_url, f"escrow:{escrows[-1]}", "ghost:1:dead", 1.5)
        summary = poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=FAST, lease_seconds=30, private_hosts=True)
    assert summary.takeovers == 2
    assert summary.escrows == clean.escrows == len(escrows)
    for resource in (f"epoch:{epochs[0]}", f"escrow:{escrows[-1]}"):
        row = _row(db_url, resource)
        assert (row["holder"], row["taken_from"], row["takeovers"], row["released"]) == \
            (summary.holder, "ghost:1:dead", 1, True)
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM net.lease WHERE released_at IS NULL").fetchone()[0] == 0
    # the same rows as a clean single poller's (provenance aside: the fetches were batched differently)
    exclude = LOAD_TIMES | {"source_id", "source_line"}
    mine, clean_state = db_state(db_url, exclude), db_state(second_db_url, exclude)
    assert mine.pop("rec.source") != [] and clean_state.pop("rec.source") != []
    assert mine == clean_state


def test_work_another_poller_finishes_during_the_cycle_is_not_done_again(db_url):
    scn = _scenario()
    escrows = sorted(scn.escrows, key=int)
    other = escrows[0]
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        _plant(db_url, f"escrow:{other}", "other:2:live", 600)  # a live poller working on it
        result: dict = {}
        worker = threading.Thread(target=lambda: result.update(summary=poll_once(
            db_url, net.chain_rest_url, net.rpc_url, policy=FAST, lease_seconds=30, process=False, private_hosts=True)))
        worker.start()
        try:
            deadline = time.monotonic() + 120
            # wait (on the database) until our poller has settled every escrow but the other poller's
            with psycopg.connect(db_url, autocommit=True) as c:
                while c.execute("SELECT count(*) FROM net.lease WHERE resource LIKE 'escrow:%%' "
                                "AND released_at IS NOT NULL").fetchone()[0] < len(escrows) - 1:
                    assert worker.is_alive() and time.monotonic() < deadline
                    time.sleep(0.01)
                # the other poller finishes its escrow (it released the lease: its work is committed)
                c.execute("UPDATE net.lease SET released_at = now() WHERE resource = %s", (f"escrow:{other}",))
        finally:
            worker.join(timeout=120)
    summary = result["summary"]
    assert summary.escrows == len(escrows) - 1
    assert summary.escrows_elsewhere == 1 and summary.takeovers == 0
    with psycopg.connect(db_url) as c:
        ids = {r[0] for r in c.execute("SELECT escrow_id FROM rec.escrow")}
    assert ids == set(escrows) - {other}  # not fetched by this poller: the other one did it


def test_a_poller_whose_escrow_lease_was_taken_over_writes_nothing_and_fails_its_cycle(db_url, monkeypatch):
    scn = _scenario()
    stolen = sorted(scn.escrows, key=int)[0]
    fresh_cursors = Leases.escrow_cursors

    def then_stolen(self, escrow_id):
        # the poller took the lease and read the cursor; now it "pauses" past its lease and another poller takes
        # the escrow over (what an expiry followed by a take does to the row)
        out = fresh_cursors(self, escrow_id)
        if escrow_id == stolen:
            with psycopg.connect(db_url) as c:
                c.execute("UPDATE net.lease SET holder = 'thief:3:x', expires_at = now() + interval '1 hour', "
                          "takeovers = takeovers + 1 WHERE resource = %s", (f"escrow:{stolen}",))
        return out

    monkeypatch.setattr(Leases, "escrow_cursors", then_stolen)
    with DevnetServer(scn) as net:
        with pytest.raises(LeaseLost, match=f"escrow:{stolen} lost to thief:3:x"):
            poll_once(db_url, net.advance_to_last_epoch().chain_rest_url, net.rpc_url, policy=FAST, lease_seconds=30,
                      holder="stale:4:y", private_hosts=True)
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM rec.escrow WHERE escrow_id = %s", (stolen,)).fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM net.cursor WHERE source = %s", (f"escrow:{stolen}",)).fetchone()[0] == 0
        error = c.execute("SELECT last_error FROM api.ingest_status WHERE source = 'chain'").fetchone()[0]
        assert "LeaseLost" in error
        # what it still held is given back at once (expired, not released: whoever takes it counts a takeover)
        assert c.execute("SELECT count(*) FROM net.lease WHERE holder = 'stale:4:y' AND released_at IS NULL "
                         "AND expires_at > now()").fetchone()[0] == 0
        assert c.execute("SELECT holder FROM net.lease WHERE resource = %s", (f"escrow:{stolen}",)).fetchone()[0] \
            == "thief:3:x"

"""A lying source is not believed (devnet, PostgreSQL): a host whose served log fails the signed check is recorded
as a failed source, with the escrow, the nonce and the reason, its log is not used, and the next member's is; with
no member passing, nothing of the failing log is taken and the escrow says why."""
from __future__ import annotations

import orjson
import psycopg

from indexer.devnet import DevnetServer, FaultConfig, Scenario, ScenarioConfig
from indexer.devnet import hostviews
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy

FAST = dict(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=3)


def _scn() -> Scenario:
    return Scenario(ScenarioConfig(seed=7, epochs=1, escrows_per_epoch=2, inferences_per_escrow=24))


def _poll(url, net):
    return poll_once(url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), private_hosts=True)


def _signed_diffs(url, escrow_id) -> list[tuple]:
    with psycopg.connect(url) as c:
        return c.execute("SELECT nonce, content, source_host FROM rec.signed_diff WHERE escrow_id = %s ORDER BY nonce",
                         (escrow_id,)).fetchall()


def test_a_host_whose_log_fails_the_signed_check_is_not_used(db_url):
    scn = _scn()
    esc = next(iter(scn.escrows.values()))
    liar = esc.slots[0]  # the first member asked
    first_lie = scn.lying_log(esc, "altered")[2]
    with DevnetServer(scn, faults=FaultConfig(lying_host=liar)) as net:
        _poll(db_url, net)
        honest = [orjson.loads(e)["diff"]["txs"] for e in hostviews.encoded_log(net.devnet, esc, False)[1]]
    got = _signed_diffs(db_url, esc.escrow_id)
    assert [content for _, content, _ in got] == honest  # the honest log, every diff as served
    assert liar not in {host for _, _, host in got}
    with psycopg.connect(db_url) as c:
        errors = [e for (e,) in c.execute("SELECT error FROM api.source_errors WHERE source = %s",
                                          (f"host:{liar}",))]
        status = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s", (f"host:{liar}",)).fetchone()
        tx_rows = c.execute("SELECT count(*) FROM rec.finish_tx WHERE escrow_id = %s", (esc.escrow_id,)).fetchone()[0]
    want = f"escrow {esc.escrow_id} nonce {first_lie}: signed check failed: user signature recovers to "
    assert any(want in e for e in errors), errors
    assert status is not None and want in status[0]
    assert tx_rows == sum(r["kind"] == "finish" for r in scn.tx_records(esc.escrow_id))


def test_with_no_member_passing_nothing_of_the_failing_log_is_taken(db_url):
    scn = _scn()
    esc = next(iter(scn.escrows.values()))
    liar = esc.slots[0]
    others = tuple(a for a in dict.fromkeys(esc.slots) if a != liar)
    with DevnetServer(scn, faults=FaultConfig(lying_host=liar, hosts_down=others)) as net:
        _poll(db_url, net)
    first_lie = scn.lying_log(esc, "altered")[2]
    assert _signed_diffs(db_url, esc.escrow_id) == []  # the log is one run here: none of it is kept
    with psycopg.connect(db_url) as c:
        last = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s",
                         (f"escrow:{esc.escrow_id}",)).fetchone()[0]
    assert last.startswith("log rejected: no member serves a log that passes the signed check from nonce ")
    assert f"{liar}: escrow {esc.escrow_id} nonce {first_lie}: signed check failed" in last


def test_a_fork_the_user_signed_too_is_left_to_the_cross_check(db_url):
    """Every diff of a user-signed fork passes the signed check: the members' comparison of roots still finds it."""
    scn = _scn()
    esc = next(iter(scn.escrows.values()))
    liar = esc.slots[0]
    with DevnetServer(scn, faults=FaultConfig(lying_host=liar, lying_kind="fork")) as net:
        _poll(db_url, net)
        honest = [orjson.loads(e)["diff"]["txs"] for e in hostviews.encoded_log(net.devnet, esc, False)[1]]
    assert [content for _, content, _ in _signed_diffs(db_url, esc.escrow_id)] == honest
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM api.source_errors WHERE source = %s AND error LIKE 'diverging%%'",
                         (f"host:{liar}",)).fetchone()[0] >= 1


def test_a_lying_witness_does_not_hold_up_an_honest_log(db_url):
    """The honest member serves first and the liar is the only witness: the liar's diff fails the signed check, so
    the honest log is taken without a third member to decide between them."""
    scn = _scn()
    esc = next(iter(scn.escrows.values()))
    members = list(dict.fromkeys(esc.slots))
    honest, liar = members[0], members[1]
    down = tuple(a for a in members if a not in (honest, liar))
    with DevnetServer(scn, faults=FaultConfig(lying_host=liar, hosts_down=down)) as net:
        _poll(db_url, net)
        served = [orjson.loads(e)["diff"]["txs"] for e in hostviews.encoded_log(net.devnet, esc, False)[1]]
    got = _signed_diffs(db_url, esc.escrow_id)
    assert [content for _, content, _ in got] == served and {host for _, _, host in got} == {honest}
    with psycopg.connect(db_url) as c:
        errors = [e for (e,) in c.execute("SELECT error FROM api.source_errors WHERE source = %s",
                                          (f"host:{liar}",))]
    assert any(f"escrow {esc.escrow_id} nonce " in e and "signed check failed" in e for e in errors), errors


def test_without_a_creator_the_log_is_taken_on_the_cross_check_and_said_so(db_url, monkeypatch):
    """An escrow whose chain answer names no creator cannot be checked as signed (unknown is not false): its log is
    taken as the members agree on it, and the escrow's errors say the check was not made."""
    from indexer.devnet import chainviews

    def without_creator(*args, **kw):
        body = escrow_json(*args, **kw)
        if "escrow" in body:
            body["escrow"] = {k: v for k, v in body["escrow"].items() if k != "creator"}
        return body
    escrow_json = chainviews.escrow_json
    monkeypatch.setattr(chainviews, "escrow_json", without_creator)
    scn = _scn()
    esc = next(iter(scn.escrows.values()))
    with DevnetServer(scn) as net:
        _poll(db_url, net)
    assert len(_signed_diffs(db_url, esc.escrow_id)) == esc.last_nonce
    with psycopg.connect(db_url) as c:
        errors = [e for (e,) in c.execute("SELECT error FROM api.source_errors WHERE source = %s",
                                          (f"escrow:{esc.escrow_id}",))]
    assert "signed check not made: the chain's devshard_escrow names no creator" in errors

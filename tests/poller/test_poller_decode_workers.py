"""A decode process that dies (out of memory, killed, a crash in native code) costs at most its escrow's cycle: the
pool is replaced, the runs in flight are tried again, the cycle and every other escrow go on, and the next cycle
captures the escrow from its committed cursor."""
from __future__ import annotations

import functools

import psycopg

from indexer.devnet import DevnetServer
from indexer.poller import poll_once
from indexer.poller.decode import DecodePool, DecodeWorkerLost
from tests.support import worker_crash
from tests.support.faultplan import scenario
from tests.support.faultrun import policy, snapshot, tables


def test_a_run_that_kills_its_worker_once_is_tried_again(tmp_path):
    pool = DecodePool(1)
    try:
        assert pool.run(worker_crash.die_once, str(tmp_path / "marker"), 21) == 21
        assert pool.replaced == 1
        assert pool.run(worker_crash.twice, 4) == 8  # the new pool keeps working
    finally:
        pool.shutdown()


def test_a_run_that_kills_every_worker_fails_alone_and_the_pool_goes_on():
    pool = DecodePool(2)
    try:
        try:
            pool.run(worker_crash.die)
        except DecodeWorkerLost as exc:
            assert exc.transient and "died twice" in str(exc)
        else:
            raise AssertionError("a run that kills every worker must fail")
        assert pool.replaced == 1  # its second death, alone, broke no pool of the others
        assert [pool.run(worker_crash.twice, n) for n in range(3)] == [0, 2, 4]
    finally:
        pool.shutdown()


def test_an_escrow_whose_decode_kills_the_worker_fails_alone_then_is_captured(db_url, second_db_url, monkeypatch):
    scn = scenario("a")
    victim = scn.epochs[0].escrows[0].escrow_id
    with DevnetServer(scn) as net:
        while net.devnet.current_epoch < scn.epochs[-1].epoch_index:
            net.advance_epoch()
        for _ in range(2):  # the reference: two clean cycles at the same point of the chain
            poll_once(second_db_url, net.chain_rest_url, net.rpc_url, policy=policy(), decode_workers=2,
                      private_hosts=True)

        with monkeypatch.context() as m:
            m.setattr("indexer.poller.fetch.decode_entries",
                      functools.partial(worker_crash.decode_or_die, frozenset({victim})))
            first = poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=policy(), decode_workers=2,
                              private_hosts=True)
        assert first.escrows_failed == 1
        with psycopg.connect(db_url) as c:
            error = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s",
                              (f"escrow:{victim}",)).fetchone()[0]
            others = c.execute("SELECT count(DISTINCT escrow_id) FROM rec.start_tx WHERE escrow_id <> %s",
                               (victim,)).fetchone()[0]
            assert c.execute("SELECT count(*) FROM rec.start_tx WHERE escrow_id = %s", (victim,)).fetchone()[0] == 0
        assert error and "decode process died" in error
        assert others == sum(len(e.escrows) for e in scn.epochs) - 1

        second = poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=policy(), decode_workers=2,
                           private_hosts=True)
        assert second.escrows_failed == 0
    cols = tables(second_db_url)
    assert snapshot(db_url, cols) == snapshot(second_db_url, cols)

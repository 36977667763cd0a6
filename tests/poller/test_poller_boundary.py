"""An epoch boundary inside a poll cycle, at a point the chain's own races (tests/poller/test_poller_races.py) do not
reach: right after the cycle read one escrow's record. The hostile proxy (tests/support/hostile.py) moves the devnet
clock as it relays that answer, so the boundary falls exactly there."""
from __future__ import annotations

import psycopg

from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from tests.support.faultplan import scenario
from tests.support.hostile import hostile_devnet, rewrite

FAST = dict(backoff_base=0.0002, backoff_max=0.002, timeout=5.0, attempts=3, deadline=5.0)
SCN = scenario("a")
FIRST, SECOND = (e.epoch_index for e in SCN.epochs)


def _poll(url: str, net):
    return poll_once(url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), decode_workers=0,
                     payload_workers=0, private_hosts=True)


def _final_state(url: str) -> tuple:
    with psycopg.connect(url) as c:
        states = c.execute("SELECT epoch_index, state, escrows, escrows_final FROM net.epoch_state ORDER BY 1"
                           ).fetchall()
        cursors = c.execute("SELECT source, cursor FROM net.cursor WHERE source LIKE 'escrow%%' ORDER BY 1").fetchall()
        escrows = c.execute("SELECT escrow_id, settled, extra ->> 'settled_height', extra ->> 'settle_nonce' "
                            "FROM rec.escrow ORDER BY 1").fetchall()
        settlements = c.execute("SELECT escrow_id, nonce, tx_raw IS NOT NULL FROM rec.settlement ORDER BY 1"
                                ).fetchall()
    return states, cursors, escrows, settlements


def test_an_epoch_boundary_between_an_escrows_record_and_its_log(db_url, second_db_url):
    """The epoch ends right after the cycle read the first escrow's record (unsettled then): its log is read after
    the boundary, its settlement lands meanwhile, and the cycle still thinks the old epoch current. It stores the
    escrow unsettled and not final, and the next cycles end exactly as cycles that never met the boundary."""
    victim = SCN.epochs[0].escrows[0].escrow_id
    route = rf"/chain-api/.*/devshard_escrow/{victim}$"
    with hostile_devnet(SCN) as (net, proxy):
        ticked = []

        def then_tick(data, req):
            if not ticked:
                ticked.append(net.advance_epoch())
            return data

        proxy.on(route, rewrite(then_tick))
        summary = _poll(db_url, net)
        assert ticked == [SECOND] and summary.epoch == FIRST and summary.escrows_failed == 0
        with psycopg.connect(db_url) as c:
            assert c.execute("SELECT settled FROM rec.escrow WHERE escrow_id = %s", (victim,)).fetchone() == (False,)
        proxy.routes.clear()
        for _ in range(2):
            _poll(db_url, net)
    with hostile_devnet(SCN) as (net, _):  # the same clocks without the boundary inside a cycle
        _poll(second_db_url, net)
        net.advance_epoch()
        for _ in range(2):
            _poll(second_db_url, net)
    assert _final_state(db_url) == _final_state(second_db_url)

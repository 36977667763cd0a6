"""A chain node whose height goes backwards: after a cycle at epoch E + 1, the node asked first answers as of epoch E
(a node still syncing, a load balancer's lagging node; the hostile proxy of tests/support/hostile.py rewrites its
``epoch_info``). Read as the chain's present, E would be ``open`` again with its stable stats forgotten; instead
the node is recorded and another asked, and with no other node the cycle fails before it reads or writes anything."""
from __future__ import annotations

import logging

import psycopg
import pytest

from indexer.db.scratch import scratch_database
from indexer.poller import poll_once
from indexer.poller.finality import ChainBehind
from indexer.sources.gonka import RetryPolicy
from tests.support.faultplan import scenario
from tests.support.hostile import hostile_devnet, rewrite

FAST = dict(backoff_base=0.0002, backoff_max=0.002, timeout=5.0, attempts=3, deadline=5.0)
SCN = scenario("a")
FIRST, SECOND = (e.epoch_index for e in SCN.epochs)
EPOCH_INFO = r"^/nodes/0/chain-api/.*/epoch_info$"


def _poll(url: str, net, nodes: int = 1):
    chain = net.chain_rest_urls(nodes) if nodes > 1 else net.chain_rest_url
    rpc = net.rpc_urls(nodes) if nodes > 1 else net.rpc_url
    return poll_once(url, chain, rpc, policy=RetryPolicy(**FAST), decode_workers=0, payload_workers=0,
                     private_hosts=True)


def _behind(data, req):
    """``epoch_info`` as a node one epoch behind answers it."""
    now = int(data["latest_epoch"]["index"])
    start, length = SCN.epoch_start(now)[0], SCN.epoch_start(now)[0] - SCN.epoch_start(now - 1)[0]
    data["latest_epoch"] = {"index": str(now - 1), "poc_start_block_height": str(start - length)}
    data["block_height"] = str(int(data["block_height"]) - length)
    return data


def _stored(url: str) -> tuple:
    with psycopg.connect(url) as c:
        states = c.execute("SELECT epoch_index, state, stats_digest FROM net.epoch_state ORDER BY 1").fetchall()
        chain = c.execute("SELECT cursor FROM net.cursor WHERE source = 'chain'").fetchone()
        escrows = c.execute("SELECT escrow_id, settled, extra ->> 'settled_height' FROM rec.escrow ORDER BY 1"
                            ).fetchall()
    return states, chain, escrows


@pytest.fixture(scope="module")
def clean(pg_admin_url, template_db):
    """Two cycles at the second epoch, every node honest."""
    with scratch_database(pg_admin_url, "indexer_chain_behind_ref", template=template_db) as url:
        with hostile_devnet(SCN) as (net, _):
            net.advance_epoch()
            _poll(url, net, nodes=2)
            _poll(url, net, nodes=2)
        return _stored(url)


def test_a_node_behind_the_stored_epochs_is_failed_over(db_url, clean):
    """Node 0 answers as of the first epoch in the second cycle, while that epoch is settling: recorded against
    node 0, node 1 read, and the tables are a clean run's (the first epoch ended and final, not ``open`` again)."""
    with hostile_devnet(SCN) as (net, proxy):
        net.advance_epoch()
        _poll(db_url, net, nodes=2)
        proxy.on(EPOCH_INFO, rewrite(_behind))
        summary = _poll(db_url, net, nodes=2)
        assert proxy.hits[EPOCH_INFO] == 1
    assert summary.epoch == SECOND
    assert _stored(db_url) == clean
    assert clean[0][-2][:2] == (FIRST, "final") and clean[0][-1][:2] == (SECOND, "open")
    with psycopg.connect(db_url) as c:
        said = c.execute("SELECT url, error FROM net.failure WHERE error LIKE 'node behind%%'").fetchall()
    assert len(said) == 1 and "/nodes/0/chain-api/" in said[0][0], said
    assert f"its current epoch is {FIRST}, but epoch {SECOND} is stored already" in said[0][1]


def test_with_every_node_behind_the_cycle_fails_before_it_writes(db_url, clean, caplog):
    """The only node answers as of the first epoch: the cycle fails with ChainBehind naming the node and both
    epochs, said on ``chain`` in api.ingest_status; nothing it stored moves back (states, the chain cursor, the
    escrows); the next cycle, the node caught up, goes on as a clean one."""
    with hostile_devnet(SCN) as (net, proxy):
        net.advance_epoch()
        _poll(db_url, net)
        before = _stored(db_url)
        proxy.on(r"/chain-api/.*/epoch_info$", rewrite(_behind))
        with pytest.raises(ChainBehind, match=f"every chain node is behind epoch {SECOND}.*epoch_info: epoch "
                                              f"{FIRST}"):
            _poll(db_url, net)
        assert _stored(db_url) == before
        with psycopg.connect(db_url) as c:
            status = c.execute("SELECT last_error FROM api.ingest_status WHERE source = 'chain'").fetchone()
        assert status and status[0].startswith("ChainBehind: every chain node is behind"), status
        proxy.routes.clear()
        _poll(db_url, net)
    assert _stored(db_url) == clean


def test_indexer_run_says_a_cycle_skipped_for_a_node_behind_in_one_line(db_url, monkeypatch, caplog):
    """Under ``indexer run`` (the scheduled poll job), a cycle that met only nodes behind is one warning line, with
    no traceback (nothing in the indexer to debug), and the job returns for the next cycle to ask again."""
    from indexer.poller import schedule

    jobs, failures = [], []
    monkeypatch.setattr(schedule, "run_jobs", lambda given: jobs.extend(given))
    with hostile_devnet(SCN) as (net, proxy):
        net.advance_epoch()
        _poll(db_url, net)
        proxy.on(r"/chain-api/.*/epoch_info$", rewrite(_behind))
        schedule.run_forever(db_url, [net.chain_rest_url], [net.rpc_url], on_failure=failures.append,
                             policy=RetryPolicy(**FAST), decode_workers=0, payload_workers=0, private_hosts=True)
        poll = next(fn for fn, _, job_id in jobs if job_id == "poll")
        with caplog.at_level(logging.WARNING, logger="indexer.poller.schedule"):
            poll()
    said = [r for r in caplog.records if r.name == "indexer.poller.schedule"]
    assert len(said) == 1 and said[0].exc_info is None
    assert said[0].getMessage().startswith(f"poll cycle skipped: every chain node is behind epoch {SECOND}")
    assert len(failures) == 1 and isinstance(failures[0], ChainBehind)


@pytest.mark.parametrize("nodes", [2, 1])
def test_a_node_answering_a_settled_escrow_as_not_yet_settled_is_failed_over(db_url, nodes):
    """Within one epoch, node 0 lags a few blocks: the cycle's settlement search (RPC) lists the escrow settled, but
    node 0's devshard_escrow still says settled false. Its stale record would take the stored escrow back to
    unsettled (an amendment, a replay, the settled level gone until the next cycle); node 0 is recorded and node 1
    read, and the stored escrow is unchanged. The escrow is fetched again here because its settlement transaction
    was read over the REST only (the node's /tx keeps not finding it), so it is not final. With no other node, the
    escrow fails this cycle (said on its ingest status) and is left as stored."""
    victim = SCN.epochs[0].escrows[0].escrow_id
    route = rf"^/nodes/0/chain-api/.*/devshard_escrow/{victim}$" if nodes > 1 else rf"/devshard_escrow/{victim}$"

    def unsettled(data, req):
        data["escrow"]["settled"] = False
        return data

    def stored():
        with psycopg.connect(db_url) as c:
            return c.execute("SELECT settled, revision FROM rec.escrow WHERE escrow_id = %s", (victim,)).fetchone()

    with hostile_devnet(SCN) as (net, proxy):
        net.app.options.lagging_rpc_txs = (victim,)
        net.advance_epoch()
        _poll(db_url, net, nodes=nodes)
        before = stored()
        assert before[0] is True
        proxy.on(route, rewrite(unsettled))
        summary = _poll(db_url, net, nodes=nodes)
        assert proxy.hits[route] == 1
    assert summary.escrows_failed == (nodes == 1)
    assert stored() == before
    with psycopg.connect(db_url) as c:
        said = c.execute("SELECT url, error FROM net.failure WHERE error LIKE %s", (f"%escrow {victim}: not settled%",)
                         ).fetchall()
        status = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s", (f"escrow:{victim}",)
                           ).fetchone()
    assert len(said) == 1 and ("/nodes/0/chain-api/" in said[0][0] or nodes == 1), said
    if nodes == 1:
        assert status and f"every chain node answers escrow {victim} so: not settled at this node" in status[0]


def test_epochs_of_another_network_in_the_database_do_not_make_a_node_behind(db_url):
    """The database holds newer epochs the chain has never had (here: states planted far past the devnet's, as a
    demo's devnet epochs stand in the embedded database a user then points at a real network): a node whose
    current epoch has no stored state is not judged behind, and the cycle runs as usual."""
    with psycopg.connect(db_url) as c:
        c.execute("INSERT INTO net.epoch_state (epoch_index, state) VALUES (%s, 'open')", (SECOND + 100,))
    with hostile_devnet(SCN) as (net, _):
        summary = _poll(db_url, net)
    assert summary.epoch == FIRST and summary.escrows == len(SCN.epochs[0].escrows)
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM net.failure WHERE error LIKE 'node behind%%'").fetchone()[0] == 0



def test_an_escrow_answer_past_a_bound_is_a_failure_naming_its_url(db_url):
    """A node answers devshard_escrow with a 300-character model id (the bound is 256): the escrow fails this
    cycle, and the failure names the node's URL and the bound."""
    def long_model(data, req):
        if isinstance(data, dict) and isinstance(data.get("escrow"), dict):
            data["escrow"]["model_id"] = "m" * 300
        return data

    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(r"/chain-api/.*/devshard_escrow/[0-9]+$", rewrite(long_model))
        summary = _poll(db_url, net)
    assert summary.escrows_failed > 0
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT url, error FROM net.failure WHERE error LIKE '%%more than the 256%%'").fetchall()
    assert rows
    assert all("/devshard_escrow/" in url and "model_id: 300 characters" in error for url, error in rows), rows

"""The epoch's warm keys as the poller captures them, through a hostile proxy in front of the devnet: a 404 from the
grants route is a failed read (no record, an error on the participant's status row), never "captured, none
granted"; a pruned height at one node is asked of the next before live grants stand in; and an answer not said to
be of the height asked is never stored as exact."""
from __future__ import annotations

from urllib.parse import quote

import psycopg
import pytest

from indexer.devnet import Scenario, ScenarioConfig
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from tests.support.hostile import Request, hostile_devnet, status

FAST = dict(backoff_base=0.0002, backoff_max=0.002, timeout=5.0, attempts=2)
GRANTS = "/grantees_by_message_type/"


def _scn() -> Scenario:
    return Scenario(ScenarioConfig(seed=11, epochs=3, escrows_per_epoch=1, inferences_per_escrow=5))


def _poll(db_url: str, net, nodes: int = 1):
    chain = net.chain_rest_urls(nodes) if nodes > 1 else net.chain_rest_url
    rpc = net.rpc_urls(nodes) if nodes > 1 else net.rpc_url
    return poll_once(db_url, chain, rpc, policy=RetryPolicy(**FAST), private_hosts=True, decode_workers=0,
                     payload_workers=0)


def _warm_keys(db_url: str) -> list[tuple]:
    with psycopg.connect(db_url) as c:
        return c.execute("SELECT epoch_index, participant, grantee, read_exact FROM rec.warm_key ORDER BY 1, 2, 3"
                         ).fetchall()


def _bodiless(req: Request, conn) -> bool:
    """A proxy that answers 200 with an object of its own (no ``grantees``), keeping the node's height header."""
    code, headers, _ = conn.relay(req)
    return status(200, b'{"error":"upstream busy"}', headers)(req, conn)


@pytest.mark.parametrize("answer", ["404", "no_grantees"])
def test_a_404_from_the_grants_route_is_a_failed_read_not_none_granted(db_url, answer):
    scn = _scn()
    host = sorted(scn.hosts_by_address)[0]
    with hostile_devnet(scn) as (net, proxy):
        net.app.options.state_retain_blocks = 10**9
        net.advance_to_last_epoch()
        # grpc-gateway's answer for a route the node (or a proxy before it) lacks; or a 200 that lists nothing
        proxy.on(GRANTS + quote(host), status(404, b'{"code":5,"message":"Not Found","details":[]}',
                                             {"Content-Type": "application/json"}) if answer == "404" else _bodiless)
        _poll(db_url, net)
    rows = _warm_keys(db_url)
    ended = {e for e, *_ in rows}
    assert ended and not [r for r in rows if r[1] == host]  # nothing recorded of the host: not "none granted"
    assert all(exact for *_, exact in rows)
    with psycopg.connect(db_url) as c:
        errors = dict(c.execute("SELECT source, last_error FROM api.ingest_status WHERE source LIKE %s",
                                (f"snapshot:%:warm_keys:{host}",)).fetchall())
    assert set(errors) == {f"snapshot:{e}:warm_keys:{host}" for e in ended}
    said = "HTTP 404" if answer == "404" else "no grantees list"
    assert all(said in why for why in errors.values())


def _pruning(req: Request, conn) -> bool:
    """A pruning node: every read at a past height answers cosmos-sdk's pruned-state error."""
    if any(k.lower() == "x-cosmos-block-height" for k in req.headers):
        body = (b'{"code":2,"message":"failed to load state at height 1; version does not exist (latest height: '
                b'2): not found","details":[]}')
        return status(500, body, {"Content-Type": "application/json"})(req, conn)
    code, headers, body = conn.relay(req)
    return status(code, body, headers)(req, conn)


def _ignoring(req: Request, conn) -> bool:
    """A proxy that drops the height header both ways: the node serves today's state, and says nothing of it."""
    sent = {k: v for k, v in req.headers.items() if k.lower() != "x-cosmos-block-height"}
    code, headers, body = conn.relay(Request(req.method, req.target, req.path, sent))
    kept = {k: v for k, v in headers.items() if "block-height" not in k.lower()}
    return status(code, body, kept)(req, conn)


def test_a_pruning_first_node_leaves_the_archive_node_to_answer_exactly(db_url):
    scn = _scn()
    with hostile_devnet(scn) as (net, proxy):
        net.app.options.state_retain_blocks = 10**9  # the devnet behind node 1 keeps every height
        net.advance_to_last_epoch()
        proxy.on(r"^/nodes/0/chain-api/", _pruning)
        _poll(db_url, net, nodes=2)
    rows = _warm_keys(db_url)
    assert rows and all(exact for *_, exact in rows)
    with psycopg.connect(db_url) as c:
        exact = c.execute("SELECT array_agg(DISTINCT params_exact) FROM api.epochs WHERE end_height IS NOT NULL"
                          ).fetchone()[0]
    assert exact == [True]


def test_answers_that_do_not_say_the_height_asked_are_never_exact(db_url):
    scn = _scn()
    with hostile_devnet(scn) as (net, proxy):
        net.app.options.state_retain_blocks = 10**9
        net.advance_to_last_epoch()
        proxy.on(r"^/chain-api/", _ignoring)

        def said() -> tuple[int, int]:
            with psycopg.connect(db_url) as c:
                return c.execute("SELECT count(*), count(DISTINCT substring(error FROM 'as of height ([0-9]+)')) "
                                 "FROM net.failure WHERE error LIKE %s", ("%names no served height%",)).fetchone()

        _poll(db_url, net)
        rows = _warm_keys(db_url)
        assert rows and not any(exact for *_, exact in rows)  # today's grants, marked inexact
        # every params and grants read of every participant gets such an answer: recorded once a cycle for the
        # node and the height asked, not once a read (net.failure would grow by that many rows every cycle)
        first, heights = said()
        assert first == heights == len({e for e, *_ in rows})
        _poll(db_url, net)
        assert said() == (2 * first, heights)


def test_a_stand_in_beside_a_node_that_failed_stays_open_until_that_node_serves_the_height(db_url):
    """Node 0 has pruned the epochs' end heights; node 1 (the archive node) answers 503 to reads at a height for
    two cycles. Live values stand in, but the read is recorded as failed, so the epochs stay settling however
    stable their stats: a final epoch is never captured again, and the stand-in would stay for good. Once node 1
    is back, the exact read replaces the stand-in and the epochs go final."""
    scn = _scn()
    archive_down = [True]

    def archive(req: Request, conn) -> bool:
        if archive_down[0] and any(k.lower() == "x-cosmos-block-height" for k in req.headers):
            return status(503, b"upstream unavailable", {"Content-Type": "text/plain"})(req, conn)
        code, headers, body = conn.relay(req)
        return status(code, body, headers)(req, conn)

    def states() -> dict[int, str]:
        with psycopg.connect(db_url) as c:
            return dict(c.execute("SELECT epoch_index, state FROM net.epoch_state").fetchall())

    def exactness() -> tuple[set, set]:
        with psycopg.connect(db_url) as c:
            params = {r[0] for r in c.execute("SELECT params_exact FROM api.epochs WHERE end_height IS NOT NULL")}
            warm = {r[0] for r in c.execute("SELECT bool_or(read_exact) FROM rec.warm_key GROUP BY participant, "
                                            "epoch_index")}
        return params, warm

    with hostile_devnet(scn) as (net, proxy):
        net.app.options.state_retain_blocks = 10**9
        net.advance_to_last_epoch()
        now = net.devnet.current_epoch
        proxy.on(r"^/nodes/0/chain-api/", _pruning)
        proxy.on(r"^/nodes/1/chain-api/", archive)
        _poll(db_url, net, nodes=2)
        _poll(db_url, net, nodes=2)  # the stats are stable now: only the open read keeps the epochs settling
        ended = {e: st for e, st in states().items() if e < now}
        assert ended and set(ended.values()) == {"settling"}
        assert exactness() == ({False}, {False})
        with psycopg.connect(db_url) as c:
            open_reads = c.execute("SELECT what, transient, error FROM net.snapshot_failure").fetchall()
        assert {w for w, *_ in open_reads} == {"params", "warm_keys"} and all(t for _, t, _ in open_reads)
        assert all("503" in err and "live values stand in" in err for *_, err in open_reads)

        archive_down[0] = False
        _poll(db_url, net, nodes=2)
        assert exactness() == ({True}, {True})
        with psycopg.connect(db_url) as c:
            assert c.execute("SELECT count(*) FROM net.snapshot_failure").fetchone()[0] == 0
        assert {e: st for e, st in states().items() if e < now} == {e: "final" for e in ended}

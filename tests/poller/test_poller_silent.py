"""Hosts that accept connections and never answer (tests/support/hostile.py ``silent``): each costs the poller one
request's attempts per cycle, like a host that trickles its answers costs one deadline, and is then skipped by every
other escrow whose group holds it; a group none of whose members answers fails its escrow alone, in bounded time."""
from __future__ import annotations

import time

import psycopg
import pytest

from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from tests.support.faultplan import scenario
from tests.support.hostile import hostile_devnet, raw, silent

QUIET = dict(backoff_base=0.0002, backoff_max=0.002, timeout=0.5, attempts=2, deadline=5.0)
SCN = scenario("a")


def _poll(url: str, net, **kw):
    return poll_once(url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**QUIET), decode_workers=0,
                     payload_workers=0, private_hosts=True, **kw)


def _cursor(url: str, escrow_id: str) -> str | None:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT cursor FROM net.cursor WHERE source = %s", (f"escrow:{escrow_id}",)).fetchone()
    return row[0] if row else None


def test_a_silent_member_costs_one_request_per_cycle(db_url):
    """The member the second escrow asks first (a witness of the first) never answers: its first request times out
    on each attempt, and then it is skipped, recorded, for the rest of the cycle; both escrows are captured."""
    first, second = SCN.epochs[0].escrows[:2]
    shared = second.slots[0]
    assert shared in first.slots
    name = SCN.hosts_by_address[shared].name
    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(rf"^/hosts/{name}/", silent())
        summary = _poll(db_url, net, escrow_workers=1)
        asked = proxy.hits[rf"^/hosts/{name}/"]
    assert summary.escrows_failed == 0
    assert asked == QUIET["attempts"], asked
    assert _cursor(db_url, first.escrow_id) == str(first.last_nonce)
    assert _cursor(db_url, second.escrow_id) == str(second.last_nonce)
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT url FROM net.failure WHERE source = %s AND error LIKE %s",
                         (f"host:{shared}", "%skipped for the rest of the cycle%")).fetchall()
    assert rows == [(f"escrow:{second.escrow_id}",)]


def test_a_group_that_never_answers_fails_its_escrow_alone_in_bounded_time(db_url):
    """Every member of the first escrow's group is silent: each costs one request's attempts, the escrow fails this
    cycle (recorded on its ingest status), and every escrow whose group has an answering member is captured."""
    victim = SCN.epochs[0].escrows[0]
    names = [SCN.hosts_by_address[a].name for a in dict.fromkeys(victim.slots)]
    others = [e for e in SCN.escrows.values() if e.epoch_index == victim.epoch_index and e is not victim
              and set(e.slots) - set(victim.slots)]
    with hostile_devnet(SCN) as (net, proxy):
        for name in names:
            proxy.on(rf"^/hosts/{name}/", silent())
        t0 = time.monotonic()
        summary = _poll(db_url, net, escrow_workers=1)  # one fetch thread: no two ask one member at once
        elapsed = time.monotonic() - t0
        asked = {name: proxy.hits[rf"^/hosts/{name}/"] for name in names}
    assert summary.escrows_failed >= 1
    assert all(n <= QUIET["attempts"] for n in asked.values()), asked
    # one request's attempts per silent member, whichever escrow asked it (not one per escrow and member)
    assert elapsed < len(names) * QUIET["attempts"] * QUIET["timeout"] + 30, elapsed
    assert _cursor(db_url, victim.escrow_id) is None
    for e in others:
        assert _cursor(db_url, e.escrow_id) == str(e.last_nonce), e.escrow_id
    with psycopg.connect(db_url) as c:
        said = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s",
                         (f"escrow:{victim.escrow_id}",)).fetchone()
    assert said and "no member of the group answered" in said[0], said


def test_a_member_silent_on_its_payload_route_costs_one_request_not_one_per_payload(db_url):
    """The member that serves an escrow's log never answers its payload requests (pipelined, a batch of them on one
    connection): the first request's attempts time out, and the rest of the batch is not sent again one by one
    (each would cost its own attempts); the next member serves every payload."""
    from indexer.devnet import Scenario, ScenarioConfig

    scn = Scenario(ScenarioConfig(seed=11, epochs=2, escrows_per_epoch=4, inferences_per_escrow=30))
    refusals: dict[str, dict[int, str]] = {}
    for eid in scn.escrows:
        for r in scn.tx_records(eid):
            if r["kind"] == "finish" and r.get("response_payload") is not None and r["input_tokens"] == 0 \
                    and r["output_tokens"] == 0:
                refusals.setdefault(eid, {})[int(r["inference_id"])] = r["response_payload"]
    victim = max(refusals, key=lambda e: len(refusals[e]))
    assert len(refusals[victim]) >= 3
    name = scn.hosts_by_address[scn.escrows[victim].slots[0]].name
    route = rf"^/hosts/{name}/devshard/[^/]+/sessions/{victim}/payloads$"
    with hostile_devnet(scn) as (net, proxy):
        net.advance_to_last_epoch()
        proxy.on(route, silent())
        t0 = time.monotonic()
        _poll(db_url, net, escrow_workers=1)
        elapsed = time.monotonic() - t0
        asked = proxy.hits[route]
    assert asked <= QUIET["attempts"], asked
    assert elapsed < len(refusals[victim]) * QUIET["attempts"] * QUIET["timeout"], elapsed
    with psycopg.connect(db_url) as c:
        stored = {int(i): p for i, p in c.execute(
            "SELECT inference_id, response_payload FROM rec.finish_tx WHERE escrow_id = %s AND input_tokens = 0 "
            "AND output_tokens = 0", (victim,))}
    assert stored == refusals[victim]


@pytest.mark.parametrize("where", ["host", "chain"])
def test_a_peer_dropping_the_connection_mid_answer_is_retried_then_failed_over(db_url, where):
    """A 200 whose Content-Length promises more than is sent before the connection closes, on every attempt: the
    member asked first for the escrow's diffs (or chain node 0, for the escrow's record) fails after its attempts,
    recorded, and the next member (node) serves it; nothing half-read is stored."""
    escrow = SCN.epochs[0].escrows[0]
    cut = raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
              b'[{"nonce": 1, "entry": ')
    if where == "host":
        route = rf"^/hosts/{SCN.hosts_by_address[escrow.slots[0]].name}/devshard/[^/]+/sessions/\d+/diffs$"
    else:
        route = rf"^/nodes/0/chain-api/.*/devshard_escrow/{escrow.escrow_id}$"
    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(route, cut)
        nodes = 2 if where == "chain" else 1
        summary = poll_once(db_url, net.chain_rest_urls(nodes) if nodes > 1 else net.chain_rest_url,
                            net.rpc_urls(nodes) if nodes > 1 else net.rpc_url, policy=RetryPolicy(**QUIET),
                            decode_workers=0, payload_workers=0, private_hosts=True)
        asked = proxy.hits[route]
    assert summary.escrows_failed == 0
    assert asked == QUIET["attempts"], asked
    for e in SCN.epochs[0].escrows:
        assert _cursor(db_url, e.escrow_id) == str(e.last_nonce)
    with psycopg.connect(db_url) as c:
        said = c.execute("SELECT url, error FROM net.failure WHERE url LIKE %s",
                         ("%/devshard_escrow/%" if where == "chain" else "%/diffs%",)).fetchall()
    assert len(said) == QUIET["attempts"] and all("RemoteProtocolError" in e or "incomplete" in e.lower()
                                                  for _, e in said), said


def test_a_settled_escrow_whose_whole_log_is_stored_and_whose_group_is_down_is_failing(db_url):
    """The escrow's log is stored whole up to its settlement's nonce, but it is not final (its settlement was read
    over the REST only); then its whole group is down. Nothing of the log is left to ask, but its final host stats
    cannot be read either: the escrow fails this cycle, said on its ingest status, as when its pages cannot be
    read."""
    victim = SCN.epochs[0].escrows[0]
    with hostile_devnet(SCN) as (net, _):
        net.app.options.lagging_rpc_txs = (victim.escrow_id,)
        net.advance_epoch()
        _poll(db_url, net)
        assert _cursor(db_url, victim.escrow_id) == str(victim.last_nonce)
        net.faults.down_hosts = set(victim.slots)
        summary = _poll(db_url, net)
    assert summary.escrows_failed == 1
    with psycopg.connect(db_url) as c:
        said = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s",
                         (f"escrow:{victim.escrow_id}",)).fetchone()
    assert said and said[0].startswith("host stats not read: no member of the group answered"), said

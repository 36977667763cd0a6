"""The poller against hostile hosts and chain nodes (tests/support/hostile.py: a proxy in front of the devnet whose
misbehaviour per route is one line). Each attack ends with the failure recorded against the host or node that
misbehaved (net.failure, api.source_errors), the escrow captured from the honest members as in a clean run, and the
cycle bounded in time (the policy's deadline) and in what it archives."""
from __future__ import annotations

import re
import time

import psycopg
import pytest

from indexer.db.scratch import scratch_database
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from tests.support.faultplan import scenario
from tests.support.hostile import Hostile, hostile_devnet, json_answer, rewrite, status, streamed, trickle

FAST = dict(backoff_base=0.0002, backoff_max=0.002, timeout=5.0, attempts=4, deadline=2.0)
SCN = scenario("b")
ESCROW = SCN.epochs[0].escrows[0]
FIRST = SCN.hosts_by_address[ESCROW.slots[0]].name  # the member asked first
MiB = 1 << 20


def _poll(db_url: str, net, *, nodes: int = 1, **kw):
    chain = net.chain_rest_urls(nodes) if nodes > 1 else net.chain_rest_url
    rpc = net.rpc_urls(nodes) if nodes > 1 else net.rpc_url
    kw.setdefault("private_hosts", True)
    return poll_once(db_url, chain, rpc, policy=RetryPolicy(**FAST), decode_workers=0, payload_workers=0, **kw)


def _captured(url: str) -> tuple:
    """What a cycle captured of the escrow: its cursor and its tx rows by kind."""
    with psycopg.connect(url) as c:
        cursor = c.execute("SELECT cursor FROM net.cursor WHERE source = %s", (f"escrow:{ESCROW.escrow_id}",)
                           ).fetchone()
        rows = c.execute("SELECT count(*) FROM rec.start_tx WHERE escrow_id = %s", (ESCROW.escrow_id,)).fetchone()
    return cursor, rows


def _failures(url: str, like: str) -> list[tuple]:
    with psycopg.connect(url) as c:
        return c.execute("SELECT f.source, f.url, f.error, f.transient FROM net.failure f "
                         "JOIN api.source_errors e ON e.id = f.id "
                         "WHERE f.url LIKE %s OR f.error LIKE %s OR f.source LIKE %s", (like, like, like)).fetchall()


@pytest.fixture(scope="module")
def clean(pg_admin_url, template_db):
    """The escrow as a clean cycle captures it."""
    with scratch_database(pg_admin_url, "indexer_clean", template=template_db) as url:
        with hostile_devnet(SCN) as (net, _):
            _poll(url, net)
        return _captured(url)


@pytest.mark.parametrize("code", [403, 302, 404])
def test_a_chain_node_answering_wrongly_is_failed_over(db_url, clean, code):
    """The first chain and RPC node answers 403 (or a redirect, or 404 for everything): a failed node, recorded
    once per request, the next node answers, the cycle succeeds."""
    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(r"^/nodes/0/", status(code, b"go away", {"Location": "http://127.0.0.1:5432/"}))
        summary = _poll(db_url, net, nodes=2)
    assert summary.escrows_failed == 0 and _captured(db_url) == clean
    rows = _failures(db_url, f"{proxy.url}/nodes/0/%")
    assert rows and all(f"HTTP {code}: go away" in e and not t for _, _, e, t in rows)


def test_a_healthz_object_is_a_failure_of_that_host(db_url, clean):
    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(rf"^/hosts/{FIRST}/devshard/healthz$", json_answer({"versions": [{"name": "v1"}]}))
        summary = _poll(db_url, net)
    assert summary.escrows_failed == 0 and _captured(db_url) == clean
    assert any("healthz: expected a JSON array, got a JSON dict" in e for _, _, e, _ in
               _failures(db_url, f"%{ESCROW.slots[0]}%") + _failures(db_url, f"%/hosts/{FIRST}/%"))


def test_a_healthz_version_name_past_its_bound_is_a_failure_of_that_host(db_url, clean):
    """A name goes into the host's routes and into records: one of 100,000 characters is refused with the bound,
    never requested or stored, and the next member serves the escrow."""
    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(rf"^/hosts/{FIRST}/devshard/healthz$", json_answer([{"name": "v" * 100_000, "status": "ok"}]))
        summary = _poll(db_url, net)
    assert summary.escrows_failed == 0 and _captured(db_url) == clean
    errors = [e for _, _, e, _ in _failures(db_url, f"%{ESCROW.slots[0]}%") + _failures(db_url, f"%/hosts/{FIRST}/%")]
    assert any("the longest of 100000 characters: past the bounds (64 names of 256)" in e for e in errors)
    assert all(len(e) < 2100 for e in errors)


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\n"],
                         ids=["negative-length", "negative-chunk"])
def test_a_host_with_a_malformed_length_is_skipped(db_url, clean, head):
    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(rf"^/hosts/{FIRST}/", streamed(head, b"x" * 65536, 100 * MiB))
        summary = _poll(db_url, net)
    assert summary.escrows_failed == 0 and _captured(db_url) == clean
    assert any("malformed answer" in e for _, _, e, _ in _failures(db_url, f"%/hosts/{FIRST}/%"))


def test_a_host_trickling_its_headers_costs_one_deadline(db_url, clean):
    """One header byte every 0.5 s never trips the read timeout (5 s); the 2 s deadline ends the request, the host
    is not asked again for it, and the next member serves the escrow."""
    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(rf"^/hosts/{FIRST}/devshard/healthz$", trickle(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 1000, 0.5))
        t0 = time.monotonic()
        summary = _poll(db_url, net)
        elapsed = time.monotonic() - t0
        asked = proxy.hits[rf"^/hosts/{FIRST}/devshard/healthz$"]
    assert summary.escrows_failed == 0 and _captured(db_url) == clean
    assert asked == 1 and elapsed < 30
    rows = _failures(db_url, f"%/hosts/{FIRST}/devshard/healthz%")
    assert rows and "DeadlineExceeded" in rows[0][2]


def test_a_body_of_spaces_is_archived_cut_short(db_url, clean):
    """A 5 MB body of spaces (not JSON) at every attempt: retried, and each attempt archives its first 4 KiB."""
    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(rf"^/hosts/{FIRST}/devshard/healthz$", status(200, b" " * (5 * MiB)))
        summary = _poll(db_url, net)
    assert summary.escrows_failed == 0 and _captured(db_url) == clean
    with psycopg.connect(db_url) as c:
        n, size = c.execute("SELECT count(*), max(length(body)) FROM net.raw_response WHERE url LIKE %s",
                            (f"%/hosts/{FIRST}/devshard/healthz%",)).fetchone()
    assert n == FAST["attempts"] and size == 4096


@pytest.fixture
def secret():
    """An internal file server on loopback, holding a secret."""
    with Hostile() as server:
        server.on(r"/creds\.json", json_answer({"password": "s3cr3t"}))
        yield server


@pytest.mark.parametrize("tail", ["/creds.json#", "/creds.json?x=", "", "@"], ids=["fragment", "query", "private",
                                                                                  "userinfo"])
def test_an_inference_url_cannot_point_the_poller_anywhere(db_url, clean, secret, tail):
    """One participant's inference_url names an internal server (with a fragment that would swallow the route, a
    query, userinfo, or just its loopback address with private hosts not allowed): refused before any request,
    recorded against the participant, nothing archived from it, the escrow captured from the other members."""
    victim = ESCROW.slots[0]
    port = secret.url.rsplit(":", 1)[1]
    url = f"http://u:p@127.0.0.1:{port}" if tail == "@" else secret.url + tail

    def lie(data, req):
        data["participant"]["inference_url"] = url
        return data

    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(rf"/participant/{victim}$", rewrite(lie))
        if tail == "":  # every member is on loopback here: only the victim's URL is vetted as the operator's
            summary = _poll(db_url, net, private_hosts=False)
        else:
            summary = _poll(db_url, net)
    assert sum(secret.hits.values()) == 0
    with psycopg.connect(db_url) as c:
        leaked = c.execute("SELECT count(*) FROM net.raw_response WHERE body LIKE %s OR url LIKE %s",
                           (b"%s3cr3t%", f"%{port}%")).fetchone()[0]
    assert leaked == 0
    why = {"/creds.json#": "query or fragment", "/creds.json?x=": "query or fragment", "@": "userinfo",
           "": "non-public address"}[tail]
    assert any(why in e and not t for _, _, e, t in _failures(db_url, f"%{victim}%")), _failures(db_url, "%")
    if tail:
        assert summary.escrows_failed == 0 and _captured(db_url) == clean


@pytest.mark.parametrize("total", [1_000_000_000, 500], ids=["huge-count", "same-page"])
def test_a_lying_tx_search_is_recorded_and_another_node_asked(db_url, clean, total):
    """Node 0's RPC claims ``total`` txs and serves its first page for every page asked: the search stops at the
    first impossible page, the lie is recorded against the node, and node 1 answers the search."""
    def lie(data, req):
        data["result"]["total_count"] = str(total)
        return data

    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(r"^/nodes/0/chain-rpc/tx_search$",
                 rewrite(lie, target=lambda t: re.sub(r"([?&])page=\d+", r"\1page=1", t)))
        t0 = time.monotonic()
        summary = _poll(db_url, net, nodes=2)
        elapsed = time.monotonic() - t0
        asked = proxy.hits[r"^/nodes/0/chain-rpc/tx_search$"]
    assert summary.escrows_failed == 0 and _captured(db_url) == clean
    assert elapsed < 60 and asked <= 2 * 3  # at most two pages per search of node 0 (a cycle makes few searches)
    rows = _failures(db_url, f"{proxy.url}/nodes/0/chain-rpc/tx_search%")
    assert rows and all("total_count" in e for _, _, e, _ in rows)


def test_the_archive_has_a_budget_per_cycle_and_a_retention(db_url):
    """What one cycle archives is bounded (past the budget answers are counted in a failure row, not kept), and
    answers older than the retention are pruned at the cycle's end."""
    from indexer.poller.store import Store

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO net.raw_response (url, status, body, fetched_at) VALUES "
                     "('http://old/x', 200, 'old', now() - interval '15 days'), "
                     "('http://recent/x', 200, 'recent', now() - interval '13 days')")
        store = Store(conn, archive_days=14, archive_budget=10_000)
        for i in range(5):
            store.on_response(f"http://h/{i}", 200, b"x" * 4000, {})
        store.finish_cycle(db_url, None)
        store.close()
        urls = [u for (u,) in conn.execute("SELECT url FROM net.raw_response ORDER BY url")]
        errors = [e for (e,) in conn.execute("SELECT error FROM api.source_errors WHERE source = 'archive'")]
    assert urls == ["http://h/0", "http://h/1", "http://recent/x"]
    assert errors == ["3 responses (12000 bytes) not archived: the cycle had archived its 10000 bytes"]


def test_failure_rows_keep_the_retention_and_the_errors_counter_never_goes_down(db_url):
    """net.failure rows older than the retention are deleted at the cycle's end, like archived answers, and
    counted by source class in net.failure_pruned: the source-errors counter of /metrics (rows kept + rows pruned)
    does not go down, and a later prune adds to the count."""
    from indexer.observe.metrics import _ERRORS
    from indexer.poller.store import Store

    def counter(conn) -> dict:
        return dict(conn.execute(_ERRORS).fetchall())

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO net.failure (source, url, error, transient, at) VALUES "
                     "('http', 'http://n/a', 'old', true, now() - interval '15 days'), "
                     "('escrow:7', '', 'old', true, now() - interval '20 days'), "
                     "('escrow:8', '', 'old too', false, now() - interval '15 days'), "
                     "('escrow:9', '', 'recent', true, now() - interval '13 days')")
        before = counter(conn)
        store = Store(conn, archive_days=14)
        store.fail("escrow:10", "", "this cycle", True)
        store.finish_cycle(db_url, None)
        kept = sorted(conn.execute("SELECT source, error FROM net.failure").fetchall())
        pruned = dict(conn.execute("SELECT source_kind, failures FROM net.failure_pruned").fetchall())
        after = counter(conn)
        conn.execute("UPDATE net.failure SET at = now() - interval '30 days' WHERE source = 'escrow:9'")
        store.finish_cycle(db_url, None)
        store.close()
        again = dict(conn.execute("SELECT source_kind, failures FROM net.failure_pruned").fetchall())
        last = counter(conn)
    assert kept == [("escrow:10", "this cycle"), ("escrow:9", "recent")]
    assert pruned == {"http": 1, "escrow": 2}
    assert after == {"http": before["http"], "escrow": before["escrow"] + 1} == last
    assert again == {"http": 1, "escrow": 3}


def test_one_member_cannot_deny_the_log_with_an_empty_page(db_url, clean):
    """The member asked first answers ``[]`` for every diffs page while the shard's tip is past it: a failure of
    that member (recorded against it), and the log is read from another."""
    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(rf"^/hosts/{FIRST}/devshard/[^/]+/sessions/\d+/diffs$", json_answer([]))
        summary = _poll(db_url, net)
    assert summary.escrows_failed == 0 and _captured(db_url) == clean
    rows = _failures(db_url, f"host:{ESCROW.slots[0]}")
    assert rows and "short of the shard's tip" in rows[0][2] and not rows[0][3]


def test_a_chain_node_moving_an_escrow_to_another_epoch_is_failed_over(db_url, clean):
    """Node 0 adds 1 to the escrow's epoch_index: recorded against node 0, node 1 asked, the escrow stored under
    the epoch whose creation events listed it."""
    def lie(data, req):
        if data.get("found"):
            data["escrow"]["epoch_index"] = str(int(data["escrow"]["epoch_index"]) + 1)
        return data

    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(r"^/nodes/0/chain-api/.*/devshard_escrow/\d+$", rewrite(lie))
        summary = _poll(db_url, net, nodes=2)
    assert summary.escrows_failed == 0 and _captured(db_url) == clean
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT epoch_index FROM rec.escrow WHERE escrow_id = %s",
                         (ESCROW.escrow_id,)).fetchone()[0] == ESCROW.epoch_index
    rows = _failures(db_url, f"{proxy.url}/nodes/0/chain-api%devshard_escrow%")
    assert rows and f"but epoch {ESCROW.epoch_index} listed its creation" in rows[0][2]


def test_a_trickling_host_costs_one_deadline_per_cycle(db_url):
    """Every route of a host trickles: it costs one deadline in the cycle, then it is skipped (and recorded) by the
    other escrows whose groups hold it, instead of costing each of them a deadline."""
    scn = scenario("a")
    first, second = scn.epochs[0].escrows[:2]
    shared = second.slots[0]  # the member the second escrow asks first; a witness of the first one
    assert shared in first.slots
    name = scn.hosts_by_address[shared].name
    with hostile_devnet(scn) as (net, proxy):
        proxy.on(rf"^/hosts/{name}/", trickle(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 1000, 0.5))
        summary = poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), decode_workers=0,
                            payload_workers=0, escrow_workers=1, private_hosts=True)
        asked = proxy.hits[rf"^/hosts/{name}/"]
    assert asked == 1 and summary.escrows_failed == 0, proxy.seen
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT url FROM net.failure WHERE source = %s AND error LIKE %s",
                         (f"host:{shared}", "%skipped for the rest of the cycle%")).fetchall()
    assert rows == [(f"escrow:{second.escrow_id}",)]


def test_a_host_at_the_operator_s_own_node_cannot_cut_the_poller_off_its_chain(db_url, clean):
    """Every participant's inference_url names the address of the operator's chain node (the devnet serves the chain
    and the hosts on one loopback port). Without --allow-private-hosts the hosts are refused, each recorded against
    its participant, and the chain reads go on: the escrow and its epoch are still read from the operator's node,
    which a guard on that address would have refused too."""
    with hostile_devnet(SCN) as (net, _):
        _poll(db_url, net, private_hosts=False)
    refused = _failures(db_url, "%non-public address%")
    assert refused, "the hosts on loopback are refused"
    assert not [f for f in refused if "/chain-api/" in f[1] or "/chain-rpc" in f[1]], refused
    with psycopg.connect(db_url) as c:
        said = c.execute("SELECT error FROM net.failure WHERE source = %s", (f"escrow:{ESCROW.escrow_id}",)).fetchone()
    assert said and "no member of the group answered" in said[0], said  # read from the chain, then its hosts refused


def test_a_stopped_proxy_leaves_no_thread_accepting() -> None:
    """Stopping the proxy ends its accept thread: one left blocked in ``accept()`` made every stop wait out its
    join's timeout (5 s) and lived on for the rest of the run."""
    proxy = Hostile().start()
    proxy.stop()
    assert [t.name for t in proxy._threads if t.is_alive()] == []

"""Fault knobs of the devnet server: 5xx, 429 + Retry-After, slow answers, truncated JSON, a lying host."""

from __future__ import annotations

import json

import httpx
import pytest

from indexer.devnet import DevnetServer, FaultConfig, Scenario, ScenarioConfig
from indexer.wire import diff_from_host_json, normalize_diffs
from indexer.wire.diffs import state_root

EPOCH_URL = "/chain-api/productscience/inference/inference/get_current_epoch"


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return Scenario(ScenarioConfig(seed=3, epochs=1, escrows_per_epoch=1, inferences_per_escrow=20))


def _statuses(scenario, faults, n=40):
    with DevnetServer(scenario, faults=faults) as net, httpx.Client(timeout=5) as c:
        return [c.get(net.url + EPOCH_URL).status_code for _ in range(n)]


def test_5xx(scenario):
    codes = _statuses(scenario, FaultConfig(p_5xx=1.0), 10)
    assert all(code in (500, 502, 503) for code in codes)


def test_429_with_retry_after(scenario):
    with DevnetServer(scenario, faults=FaultConfig(p_429=1.0, retry_after=7)) as net, httpx.Client() as c:
        r = c.get(net.url + EPOCH_URL)
        assert r.status_code == 429 and r.headers["Retry-After"] == "7"


def test_partial_probabilities_are_seeded_and_deterministic(scenario):
    faults = FaultConfig(seed=42, p_5xx=0.3, p_429=0.2)
    first, second = _statuses(scenario, faults), _statuses(scenario, faults)
    assert first == second
    assert {200, 429} <= set(first) and set(first) & {500, 502, 503}
    assert _statuses(scenario, FaultConfig(seed=43, p_5xx=0.3, p_429=0.2)) != first


def test_slow_answer_is_a_client_read_timeout(scenario):
    with DevnetServer(scenario, faults=FaultConfig(p_delay=1.0, delay_seconds=0.5)) as net:
        with httpx.Client(timeout=httpx.Timeout(5, read=0.1)) as c, pytest.raises(httpx.ReadTimeout):
            c.get(net.url + EPOCH_URL)
        with httpx.Client(timeout=5) as c:  # a patient client gets the answer
            assert c.get(net.url + EPOCH_URL).json() == {"epoch": "408"}


def test_truncated_json_body(scenario):
    esc = scenario.epoch(408).escrows[0]
    with DevnetServer(scenario, faults=FaultConfig(p_truncate=1.0)) as net, httpx.Client() as c:
        r = c.get(f"{net.host_url(esc.slots[0])}/devshard/v5/sessions/{esc.escrow_id}/diffs", params={"from": 1})
        assert r.status_code == 200 and len(r.content) == int(r.headers["Content-Length"])
        with pytest.raises(json.JSONDecodeError):
            json.loads(r.content)


def test_fault_path_filter_and_control_routes_are_exempt(scenario):
    faults = FaultConfig(p_5xx=1.0, paths=("/chain-rpc/",))
    with DevnetServer(scenario, faults=faults) as net, httpx.Client() as c:
        assert c.get(net.url + EPOCH_URL).status_code == 200
        assert c.get(net.rpc_url + "/status").status_code >= 500
    with DevnetServer(scenario, faults=FaultConfig(p_5xx=1.0)) as net, httpx.Client() as c:
        assert c.post(net.url + "/devnet/advance").json() == {"epoch": "409"}
        assert net.faults.injected["5xx"] == 0


def test_lying_host_serves_a_diverging_log(scenario):
    esc = scenario.epoch(408).escrows[0]
    liar, honest = esc.slots[0], next(a for a in esc.slots if a != esc.slots[0])
    with DevnetServer(scenario, faults=FaultConfig(lying_host=liar)) as net, httpx.Client() as c:
        def log(address):
            r = c.get(f"{net.host_url(address)}/devshard/v5/sessions/{esc.escrow_id}/diffs",
                      params={"from": 1, "to": 64})
            return [diff_from_host_json(e, "v5") for e in r.json()]

        lie, truth = log(liar), log(honest)
    assert [d["nonce"] for d in lie] == [d["nonce"] for d in truth]
    diverged = [a["nonce"] for a, b in zip(lie, truth) if state_root(a) != state_root(b)]
    assert diverged and diverged == list(range(diverged[0], len(truth) + 1))  # every later root differs
    assert all(a["user_sig"] == b["user_sig"] for a, b in zip(lie, truth))  # it cannot re-sign as the user
    assert normalize_diffs(esc.escrow_id, truth, "v5", esc.log.payloads).records == scenario.tx_records(esc.escrow_id)
    assert normalize_diffs(esc.escrow_id, lie, "v5", esc.log.payloads).records != scenario.tx_records(esc.escrow_id)


def test_host_down_closes_the_connection_until_brought_back(scenario):
    esc = scenario.epoch(408).escrows[0]
    host = esc.slots[0]
    with DevnetServer(scenario, faults=FaultConfig(hosts_down=(host,))) as net, httpx.Client() as c:
        url = f"{net.host_url(host)}/devshard/healthz"
        with pytest.raises(httpx.RemoteProtocolError):
            c.get(url)
        other = next(a for a in esc.slots if a != host)
        assert c.get(f"{net.host_url(other)}/devshard/healthz").status_code == 200  # only that host is down
        net.faults.down_hosts.discard(host)  # the outage ends (between two poll cycles, in the fault suite)
        assert c.get(url).status_code == 200
        assert net.faults.injected["down"] == 1


def test_chain_nodes_share_the_listener_and_one_can_be_down(scenario):
    with DevnetServer(scenario, faults=FaultConfig(nodes_down=(0,))) as net, httpx.Client() as c:
        rest, rpc = net.chain_rest_urls(2), net.rpc_urls(2)
        assert c.get(rest[1] + EPOCH_URL.removeprefix("/chain-api")).json() == {"epoch": "408"}
        assert c.get(rpc[1] + "/status").status_code == 200
        for url in (rest[0] + EPOCH_URL.removeprefix("/chain-api"), rpc[0] + "/status"):
            with pytest.raises(httpx.RemoteProtocolError):
                c.get(url)


def test_slow_host_answers_late(scenario):
    esc = scenario.epoch(408).escrows[0]
    host = esc.slots[0]
    faults = FaultConfig(slow_hosts=(host,), slow_seconds=0.3)
    with DevnetServer(scenario, faults=faults) as net:
        with httpx.Client(timeout=httpx.Timeout(5, read=0.1)) as c, pytest.raises(httpx.ReadTimeout):
            c.get(f"{net.host_url(host)}/devshard/healthz")
        with httpx.Client(timeout=5) as c:
            assert c.get(f"{net.host_url(host)}/devshard/healthz").status_code == 200
        assert net.faults.injected["slow"] == 2


def test_escrow_pruned_ahead_of_its_epoch(scenario):
    esc = scenario.epoch(408).escrows[0]
    with DevnetServer(scenario) as net, httpx.Client() as c:
        chain = f"{net.chain_rest_url}/productscience/inference/inference/devshard_escrow/{esc.escrow_id}"
        diffs = f"{net.host_url(esc.slots[0])}/devshard/{esc.protocol_version}/sessions/{esc.escrow_id}/diffs"
        assert c.get(chain).json()["found"] is True
        net.devnet.prune_escrow(esc.escrow_id)
        assert c.get(chain).json() == {"found": False}
        assert c.get(diffs, params={"from": 1}).status_code == 404


def _settled_ids(c, url, query="devshard_escrow_settled.escrow_id EXISTS"):
    r = c.get(url + "/tx_search", params={"query": f'"{query}"', "per_page": "100"})
    return r.status_code, [tx["height"] for tx in (r.json().get("result") or {}).get("txs", [])]


def test_tick_after_the_settlement_search_moves_the_clock_once(scenario):
    with DevnetServer(scenario) as net, httpx.Client() as c:
        net.devnet.tick_after_settlement_search = True
        created = c.get(net.rpc_url + "/tx_search", params={"query": "\"devshard_escrow_created.epoch_index='408'\""})
        assert created.status_code == 200 and net.devnet.current_epoch == 408  # other searches do not tick
        assert _settled_ids(c, net.rpc_url) == (200, [])  # answered as of epoch 408: nothing settled yet
        assert net.devnet.current_epoch == 409 and not net.devnet.tick_after_settlement_search
        assert len(_settled_ids(c, net.rpc_url)[1]) == 1 and net.devnet.current_epoch == 409  # once


def test_settlement_searches_unindexed_or_failing(scenario):
    esc = scenario.epoch(408).escrows[0]
    one = f"devshard_escrow_settled.escrow_id='{esc.escrow_id}'"
    with DevnetServer(scenario) as net, httpx.Client() as c:
        net.advance_epoch()
        assert _settled_ids(c, net.rpc_url, one) == (200, [str(net.devnet.settle_height(esc))])
        net.app.options.unindexed_settlements = (esc.escrow_id,)
        assert _settled_ids(c, net.rpc_url, one) == (200, []) and _settled_ids(c, net.rpc_url) == (200, [])
        net.app.options.unindexed_settlements = ()
        net.app.options.failing_settlement_searches = (esc.escrow_id,)
        assert _settled_ids(c, net.rpc_url, one)[0] == 500
        assert _settled_ids(c, net.rpc_url)[0] == 200  # only the search for that escrow's settlement fails


def test_missing_epoch_group_answers_404(scenario):
    url = "/chain-api/productscience/inference/inference/epoch_group_data/408"
    with DevnetServer(scenario) as net, httpx.Client() as c:
        assert c.get(net.url + url).status_code == 200
        net.app.options.missing_epochs = (408,)
        assert c.get(net.url + url).status_code == 404

"""The devnet over HTTP: every route with httpx, diffs decoded back to the scenario's ground truth."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.sources.gonka.host import stored_response_payload
from indexer.wire import (
    diff_from_host_json,
    escrow_record,
    host_epoch_stats_record,
    host_stats_records,
    model_snapshot_record,
    normalize_diffs,
)
from indexer.wire.normalize import current_epoch, participant_inference_url
from indexer.wire.rpc import latest_block_height, tx_search_events, tx_search_total

CHAIN = "/productscience/inference/inference"
CONFIG = ScenarioConfig(seed=11, epochs=4, escrows_per_epoch=2, inferences_per_escrow=30)


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return Scenario(CONFIG)


@pytest.fixture
def net(scenario):
    with DevnetServer(scenario) as server:
        yield server


@pytest.fixture
def client():
    with httpx.Client(timeout=10) as c:
        yield c


def chain(client, net, path, **params):
    r = client.get(f"{net.chain_rest_url}{CHAIN}/{path}", params=params)
    r.raise_for_status()
    return r.json()


def escrows_of_epoch(client, net, epoch, per_page=1):
    """Enumerate escrows through tx_search, page by page (per_page=1 forces paging)."""
    ids, page = [], 1
    while True:
        r = client.get(f"{net.rpc_url}/tx_search", params={
            "query": f"\"devshard_escrow_created.epoch_index='{epoch}'\"", "page": page, "per_page": per_page,
            "order_by": '"asc"'})
        r.raise_for_status()
        ids += [e.attributes["escrow_id"] for e in tx_search_events(r.json(), "devshard_escrow_created")]
        if len(ids) >= tx_search_total(r.json()):
            return ids
        page += 1


def fetch_diffs(client, host_url, escrow_id, page=64):
    entries, first = [], 1
    while True:
        r = client.get(f"{host_url}/devshard/v5/sessions/{escrow_id}/diffs",
                       params={"from": first, "to": first + page - 1})
        r.raise_for_status()
        batch = r.json()
        entries += batch
        if len(batch) < page:
            return entries
        first += page


def test_chain_basics(client, net, scenario):
    assert current_epoch(chain(client, net, "get_current_epoch")) == 408
    info = chain(client, net, "epoch_info")
    assert current_epoch(info) == 408 and info["latest_epoch"]["poc_start_block_height"] == "2450000"
    params = chain(client, net, "params")["params"]["devshard_escrow_params"]
    assert params["group_size"] == 16 and params["execution_timeout"] == "1920" and params["token_price"] == "10"
    status = client.get(f"{net.rpc_url}/status").json()
    assert latest_block_height(status) > 2450000


def test_epoch_group_data_root_and_sub_groups(client, net):
    root = chain(client, net, "epoch_group_data/408")["epoch_group_data"]
    assert root["model_id"] == "" and root["model_snapshot"] is None and len(root["sub_group_models"]) == 3  # as mainnet: null
    assert model_snapshot_record({"epoch_group_data": root}) is None
    args = {}
    for model in root["sub_group_models"]:
        rec = model_snapshot_record(chain(client, net, "epoch_group_data/408", model_id=model))
        args[model] = rec["model_args"]
    assert args["deepseek-ai/DeepSeek-V4-Flash-0731"][:2] == ["--max-model-len", "400000"]
    assert args["MiniMaxAI/MiniMax-M2.7"][:2] == ["--max-model-len", "180000"]
    assert "--max-model-len=400000" in args["zai-org/GLM-5.3-Flash"]
    assert client.get(f"{net.chain_rest_url}{CHAIN}/epoch_group_data/999").status_code == 404


def test_full_crawl_matches_ground_truth(client, net, scenario):
    """tx_search → escrow → participants → host diffs + payloads → records == truth."""
    ids = escrows_of_epoch(client, net, 408)
    assert ids == [e.escrow_id for e in scenario.epoch(408).escrows]
    for eid in ids:
        esc_json = chain(client, net, f"devshard_escrow/{eid}")
        rec = escrow_record(esc_json, protocol_version="v5")
        assert rec["slots"] == scenario.escrows[eid].slots and rec["settled"] is False
        executor = rec["slots"][1]
        host_url = participant_inference_url(chain(client, net, f"participant/{executor}"))
        entries = fetch_diffs(client, host_url, eid, page=20)
        diffs = [diff_from_host_json(e, "v5") for e in entries]
        assert [d["nonce"] for d in diffs] == list(range(1, len(diffs) + 1))
        # the signed root (omitempty) and the host's root after each diff (state_hash) agree
        assert [d["state_hash"] for d in diffs] == scenario.escrows[eid].roots[:len(diffs)]
        assert all(d["post_state_root"] == d["state_hash"] and d["escrow_id"] == "" for d in diffs)
        finishes = {tx["finish_inference"]["inference_id"] for d in diffs for tx in d["txs"] if "finish_inference" in tx}
        payloads = {}
        for iid in finishes:
            r = client.get(f"{host_url}/devshard/v5/sessions/{eid}/payloads", params={"inference_id": iid},
                           headers={"X-Validator-Address": "gonka1indexer"})
            r.raise_for_status()
            payloads[iid] = stored_response_payload(r.json())
        out = normalize_diffs(eid, diffs, rec["protocol_version"], payloads)
        assert out.records == scenario.tx_records(eid)


def test_host_shard_stats(client, net, scenario):
    esc = scenario.epoch(408).escrows[0]
    host_url = net.host_url(esc.slots[0])
    shards = client.get(f"{host_url}/devshard/v5/stats/shards").json()
    assert shards["current_epoch_id"] == 408 and esc.escrow_id in shards["active_escrows"]
    assert client.get(f"{host_url}/devshard/stats/shards").json() == shards  # versionless → newest
    detail = client.get(f"{host_url}/devshard/v5/stats/shards/{esc.escrow_id}").json()
    assert detail["group"][0] == {"SlotID": 0, "ValidatorAddress": esc.slots[0]}
    assert set(detail["host_stats"]) == {str(i) for i in range(16)}
    recs = host_stats_records(detail)
    assert [{k: r[k] for k in r if k not in ("kind", "escrow_id", "slot_id")} for r in recs] == esc.host_stats()
    assert client.get(f"{host_url}/devshard/healthz").json() == [{"name": "v5", "status": "ok"}]


def test_diff_page_limit_and_errors(client, net, scenario):
    esc = scenario.epoch(408).escrows[0]
    url = f"{net.host_url(esc.slots[0])}/devshard/v5/sessions/{esc.escrow_id}/diffs"
    assert len(client.get(url, params={"from": 1, "to": 64}).json()) == min(64, esc.last_nonce)
    r = client.get(url, params={"from": 1, "to": 65})
    assert r.status_code == 400 and r.text.startswith("diff range exceeds one page")
    assert client.get(url, params={"from": esc.last_nonce + 1, "to": esc.last_nonce + 5}).json() == []
    outsider = next(h for h in scenario.hosts if h.address not in esc.slots)  # CONFIG has hosts outside any group
    assert client.get(f"{net.host_url(outsider.address)}/devshard/v5/sessions/{esc.escrow_id}/diffs",
                      params={"from": 1}).status_code == 404
    assert client.get(url.replace("/v5/", "/v6/"), params={"from": 1}).status_code == 404


def test_payload_route_wants_validator_header(client, net, scenario):
    esc = scenario.epoch(408).escrows[0]
    iid = next(iter(esc.log.payloads))
    url = f"{net.host_url(esc.slots[0])}/devshard/v5/sessions/{esc.escrow_id}/payloads"
    assert client.get(url, params={"inference_id": iid}).status_code == 401
    r = client.get(url, params={"inference_id": iid}, headers={"X-Validator-Address": "anyone"})
    assert stored_response_payload(r.json()) == esc.log.payloads[iid]


def test_old_route_is_gone(client, net, scenario):
    r = client.get(f"{net.host_url(scenario.hosts[0].address)}/v1/devshard/stats/shards")
    assert r.status_code == 410 and r.headers["Deprecation"] == "true" and "/devshard/v5" in r.headers["Link"]


def test_signatures(client, net, scenario):
    esc = scenario.epoch(408).escrows[0]
    r = client.get(f"{net.host_url(esc.slots[0])}/devshard/v5/sessions/{esc.escrow_id}/signatures", params={"nonce": 1})
    assert set(r.json()["signatures"]) == {str(i) for i in range(16)}


def test_settlement_stats_and_pruning_follow_the_clock(client, net, scenario):
    esc = scenario.epoch(408).escrows[0]
    host = esc.slots[0]
    assert chain(client, net, f"devshard_host_epoch_stats/408/{host}") == {"found": False}  # not settled yet
    assert chain(client, net, "devshard_escrow/1975") == {"found": False}  # epoch 410 not created yet

    assert client.post(f"{net.url}/devnet/advance").json() == {"epoch": "409"}
    assert escrow_record(chain(client, net, f"devshard_escrow/{esc.escrow_id}"))["settled"] is True
    stats = host_epoch_stats_record(chain(client, net, f"devshard_host_epoch_stats/408/{host}"))
    expected = scenario.host_epoch_stats(408)[host]
    assert {k: stats[k] for k in expected} == expected
    shards = client.get(f"{net.host_url(host)}/devshard/v5/stats/shards").json()
    assert esc.escrow_id not in shards["active_escrows"]  # current epoch only
    settled = client.get(f"{net.rpc_url}/tx_search",
                         params={"query": f"\"devshard_escrow_settled.escrow_id='{esc.escrow_id}'\""}).json()
    assert tx_search_total(settled) == 1

    net.advance_epoch()
    net.advance_epoch()  # 411: epoch 408 < 411 - 2 → pruned
    assert chain(client, net, f"devshard_escrow/{esc.escrow_id}") == {"found": False}
    assert chain(client, net, f"devshard_host_epoch_stats/408/{host}") == {"found": False}
    r = client.get(f"{net.host_url(host)}/devshard/v5/sessions/{esc.escrow_id}/diffs", params={"from": 1})
    assert r.status_code == 404
    assert escrows_of_epoch(client, net, 408, per_page=100) == [e.escrow_id for e in scenario.epoch(408).escrows]
    assert escrow_record(chain(client, net, "devshard_escrow/1973"))["escrow_id"] == "1973"  # 409 still live


def test_tx_search_paging_errors(client, net):
    q = {"query": "\"devshard_escrow_created.epoch_index='408'\"", "per_page": 1}
    assert tx_search_total(client.get(f"{net.rpc_url}/tx_search", params={**q, "page": 2}).json()) == 2
    r = client.get(f"{net.rpc_url}/tx_search", params={**q, "page": 3})
    assert r.status_code == 500 and "page should be within [1, 2] range" in r.json()["error"]["data"]
    none = client.get(f"{net.rpc_url}/tx_search", params={"query": "\"devshard_escrow_created.epoch_index='1'\""})
    assert tx_search_total(none.json()) == 0


def test_base64_events_and_max_model_len_knobs(client, scenario):
    with DevnetServer(scenario, b64_events=True, escrow_max_model_len="string") as net:
        r = client.get(f"{net.rpc_url}/tx_search",
                       params={"query": "\"devshard_escrow_created.epoch_index='408'\""}).json()
        raw_key = r["result"]["txs"][0]["tx_result"]["events"][1]["attributes"][0]["key"]
        assert raw_key != "escrow_id"  # really encoded on the wire
        assert [e.attributes["escrow_id"] for e in tx_search_events(r, "devshard_escrow_created")] == ["1971", "1972"]
        esc = chain(client, net, "devshard_escrow/1972")
        assert esc["escrow"]["max_model_len"] == "180000" and escrow_record(esc)["max_model_len"] == 180000
    with DevnetServer(scenario, escrow_max_model_len="number") as net:
        assert chain(client, net, "devshard_escrow/1971")["escrow"]["max_model_len"] == 400000


def _raw_exchange(net, data: bytes) -> bytes:
    """Send ``data`` on one fresh connection and read until the server closes it."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(net.url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_http_framing_keep_alive_close_and_bad_requests(net):
    """The devnet reads requests itself (not BaseHTTPRequestHandler's parser): two requests on one connection get
    two answers in order, ``Connection: close`` ends the connection after its answer, HTTP/1.0 closes by default,
    a POST body is drained (the next request on the connection still parses), and a request line that is not
    HTTP gets a 400 and a closed connection."""
    host = net.scenario.hosts[0].name
    two = (f"GET /hosts/{host}/devshard/healthz HTTP/1.1\r\nHost: x\r\n\r\n"
           f"POST /devnet/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
           f"GET /chain-rpc/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").encode()
    answers = _raw_exchange(net, two)
    assert answers.count(b"HTTP/1.1 ") == 3
    first, second, third = answers.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200 OK\r\n") and b"Content-Type: application/json\r\n" in first
    assert second.startswith(b"404 Not Found\r\n")
    assert third.startswith(b"200 OK\r\n") and b"Connection: close\r\n" in third
    assert b"\r\nDate: " in first
    head, _, body = third.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.startswith(b"Content-Length")))
    assert len(body) == length and body.startswith(b"{")

    head = _raw_exchange(net, b"HEAD /chain-rpc/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")  # the length, not the body
    assert b"Content-Length: " in head and b"Content-Length: 0\r\n" not in head

    old = _raw_exchange(net, b"GET /chain-rpc/status HTTP/1.0\r\nHost: x\r\n\r\n")  # closes without Connection
    assert old.startswith(b"HTTP/1.1 200 OK\r\n")
    assert _raw_exchange(net, b"hello there\r\n\r\n").startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert _raw_exchange(net, b"GET / HTTP/1.1\r\nno colon here\r\n\r\n").startswith(b"HTTP/1.1 400 ")


def test_request_headers_reach_the_app_as_sent(client, net, scenario):
    """Header names keep the client's case for the routes (the payload route reads X-Validator-Address, any case)."""
    esc = next(iter(scenario.escrows.values()))
    host = scenario.hosts_by_address[esc.slots[0]].name
    iid = next(iter(esc.log.payloads))
    url = f"{net.url}/hosts/{host}/devshard/{esc.protocol_version}/sessions/{esc.escrow_id}/payloads"
    for name in ("X-Validator-Address", "x-validator-address"):
        assert client.get(url, params={"inference_id": iid}, headers={name: "gonka1v"}).status_code == 200


def test_requests_split_across_reads_and_answers_ahead_of_a_slow_one(net):
    """A request is answered whatever the reads cut it into (its line, its headers and its body each arriving
    apart, as over a slow link), and the answers queued for a pipelined batch leave before a slow request of
    that batch waits: the client reads the first answer while the second is still being held back."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(net.url)
    pieces = [b"POST /devnet/noth", b"ing HTTP/1.1\r\nHost: x\r\nContent-", b"Length: 5\r\n\r\nhel",
              b"lo", b"GET /chain-rpc/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"]
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        for piece in pieces:
            s.sendall(piece)
        answers = b""
        while chunk := s.recv(65536):
            answers += chunk
    assert answers.startswith(b"HTTP/1.1 404 ") and answers.count(b"HTTP/1.1 ") == 2
    assert b"HTTP/1.1 200 OK\r\n" in answers and b"Connection: close\r\n" in answers

    slow = net.scenario.hosts[0]
    net.faults.slow_hosts.add(slow.address)
    net.faults.config = dataclasses.replace(net.faults.config, slow_seconds=30.0)
    try:
        with socket.create_connection((u.hostname, u.port), timeout=10) as s:
            s.sendall(("GET /chain-rpc/status HTTP/1.1\r\nHost: x\r\n\r\n"
                       f"GET /hosts/{slow.name}/devshard/healthz HTTP/1.1\r\nHost: x\r\n\r\n").encode())
            first = s.recv(65536)  # within the socket's 10 s, while the slow answer waits 30 s
            assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.count(b"HTTP/1.1 ") == 1
    finally:
        net.faults.slow_hosts.discard(slow.address)


def test_a_route_that_raises_loses_only_its_own_answer(net):
    """Answers queued for a pipelined batch are sent even when a later request of the batch crashes its route
    (the connection then closes, as the stdlib server's did): the client gets every answer before the crash."""
    def broken(*args, **kwargs):
        raise RuntimeError("route crashed")

    for i, (method, pattern, handler) in enumerate(net.app._routes):
        if "signatures" in pattern.pattern:
            net.app._routes[i] = (method, pattern, broken)  # this test's server only
    esc = next(iter(net.scenario.escrows.values()))
    host = net.scenario.hosts_by_address[esc.slots[0]].name
    answers = _raw_exchange(net, (
        "GET /chain-rpc/status HTTP/1.1\r\nHost: x\r\n\r\n"
        "GET /chain-rpc/status HTTP/1.1\r\nHost: x\r\n\r\n"
        f"GET /hosts/{host}/devshard/{esc.protocol_version}/sessions/{esc.escrow_id}/signatures?nonce=1 HTTP/1.1\r\n"
        "Host: x\r\n\r\n").encode())
    assert answers.count(b"HTTP/1.1 200 OK\r\n") == 2


def test_rpc_hosts_retire_the_http_payload_route_and_take_connect_posts(scenario):
    import argparse

    from indexer.devnet.options import add_arguments
    from indexer.devnet.run import server_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    new, old = scenario.hosts[0].address, scenario.hosts[1].address
    with pytest.raises(SystemExit, match="gonka1nobody: not a devnet participant"):
        server_from_args(parser.parse_args(["--seed", str(scenario.config.seed), "--rpc-hosts", "gonka1nobody"]))
    args = parser.parse_args(["--seed", str(scenario.config.seed), "--epochs", str(scenario.config.epochs),
                              "--rpc-hosts", new])
    with server_from_args(args) as net, httpx.Client(timeout=5) as client:
        esc = next(e for e in net.scenario.escrows.values() if new in e.slots and old in e.slots)
        iid = next(iter(esc.log.payloads))
        path = f"/devshard/{esc.protocol_version}/sessions/{esc.escrow_id}"
        r = client.get(net.host_url(new) + path + "/payloads", params={"inference_id": iid},
                       headers={"X-Validator-Address": old})
        assert (r.status_code, r.headers["X-Devshard-Error"]) == (410, "http_session_retired")
        assert r.json() == {"message": "peer HTTP session route retired; use Connect /sessions/{id}/rpc/"}
        r = client.get(net.host_url(old) + path + "/payloads", params={"inference_id": iid},
                       headers={"X-Validator-Address": old})
        assert r.status_code == 200  # an old host keeps its HTTP route
        attach = path + "/rpc/devshard.transport.v1.PeerAuthService/Attach"
        r = client.post(net.host_url(new) + attach, content=b'{"peerAddress": ""}',
                        headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()) == (400, {"code": "invalid_argument", "message": "peer_address is required"})
        r = client.post(net.host_url(new) + attach, content=b"\x0a\x00", headers={"Content-Type": "application/proto"})
        assert r.status_code == 415  # the devnet speaks Connect's JSON codec only
        r = client.post(net.host_url(old) + attach, content=b"{}", headers={"Content-Type": "application/json"})
        assert r.status_code == 404  # an old host has no Connect service
        r = client.post(net.host_url(new) + path + "/rpc/devshard.transport.v1.PayloadService/GetPayload",
                        content=b"{}", headers={"Content-Type": "application/json", "X-Devshard-Session": "00" * 16})
        assert (r.status_code, r.headers["X-Devshard-Error"]) == (401, "invalid_session_token")

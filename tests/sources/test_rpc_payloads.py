"""Payloads over Connect RPC from hosts whose HTTP payload route is retired (410 http_session_retired): the client's
Attach and GetPayload against the devnet's new hosts, which check the signatures with their own preimages; each
refusal of a bad Attach; the session kept, renewed on expiry and on a 401; the route each host speaks reported once;
and the start-up check that the key file holds the configured address's key or a grantee's."""
from __future__ import annotations

import base64
import json
import re
import time

import httpx
import pytest

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.sources.gonka import ChainRest, DevshardHost, FetchError, Fetcher, RetryPolicy
from indexer.sources.gonka.fastclient import FastClient
from indexer.sources.gonka.identity import check_operator_key
from indexer.sources.gonka.rpcpayloads import (
    ATTACH_PROCEDURE, ConnectPayloads, PayloadShapeError, attach_message, rpc_base,
)
from indexer.sources.gonka.signing import Operator, OperatorConfigError

FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=3)


def _scenario() -> Scenario:
    return Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=3, inferences_per_escrow=30))


def _case(scn: Scenario):
    """(operator address, an escrow whose group holds it and has 0/0 payloads, one such inference id)."""
    for esc in scn.escrows.values():
        ids = [r["inference_id"] for r in scn.tx_records(esc.escrow_id) if r["kind"] == "finish"
               and r.get("response_payload") is not None and r["input_tokens"] == 0 and r["output_tokens"] == 0]
        if ids:
            return esc.slots[0], esc, ids[0]
    raise AssertionError("no 0/0 payload in the scenario")


@pytest.fixture(scope="module")
def rpcnet():
    scn = _scenario()
    _, esc, _ = _case(scn)
    new = tuple(dict.fromkeys(esc.slots))[:-1] or tuple(esc.slots)  # all but one member are new hosts
    retired = tuple(h.address for h in scn.hosts if h.address not in esc.slots)[:1]
    with DevnetServer(scn, payload_auth=True, rpc_hosts=new, retired_hosts=retired) as net:
        yield net


def _op(net, address: str, key_of: str | None = None) -> Operator:
    return Operator(address, net.scenario.keys.secret_of(key_of or address))


def _host(net, address: str, op: Operator | None, diagnoses: list | None = None) -> DevshardHost:
    fetcher = Fetcher(net.host_url(address), policy=FAST, client=FastClient())
    return DevshardHost(address, fetcher, operator=op,
                        on_diagnosis=(lambda *a: diagnoses.append(a)) if diagnoses is not None else None)


def _attach_body(host: str, peer: str, secret_of: Operator, ts: int, nonce: bytes) -> bytes:
    sig = secret_of.sign_recoverable(attach_message(host, ts, peer, nonce))
    return json.dumps({"peerAddress": peer, "attachNonce": base64.b64encode(nonce).decode(),
                       "protocolVersion": "devshard.transport.v1", "hostAddress": host, "timestamp": str(ts),
                       "signature": base64.b64encode(sig).decode()}).encode()


def _post_attach(net, esc, host: str, body: bytes) -> httpx.Response:
    url = net.host_url(host) + rpc_base(esc.protocol_version, esc.escrow_id) + ATTACH_PROCEDURE
    return httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=5)


def test_a_mixed_group_is_read_over_each_hosts_own_route(rpcnet):
    scn = rpcnet.scenario
    address, esc, iid = _case(scn)
    op = _op(rpcnet, address)
    members = list(dict.fromkeys(esc.slots))
    routes, diagnoses = {}, []
    for member in members:
        host = _host(rpcnet, member, op, diagnoses)
        got = host.payloads(esc.protocol_version, esc.escrow_id, [iid, iid], validator="x", epoch=esc.epoch_index,
                            members=esc.slots)
        assert got == [esc.log.payloads[iid]] * 2, member
        routes[member] = host.route
        if host.rpc is not None and host.route == "connect-rpc":
            assert host.rpc.attaches == 1  # one session for both requests
    assert routes == {m: ("connect-rpc" if m in rpcnet.app.options.rpc_hosts else "http") for m in members}
    assert "http" in routes.values() and "connect-rpc" in routes.values()
    said = {source: message for source, _, message, _ in diagnoses}
    assert set(said) == {f"host:{m}" for m in members if routes[m] == "connect-rpc"}
    assert all(m.startswith("payload route: Connect RPC (the HTTP payload route is retired (410 X-Devshard-Error: "
                            "http_session_retired))") for m in said.values())


def test_a_failure_about_a_served_payload_names_the_route_the_host_served_it_on(rpcnet):
    address, esc, iid = _case(rpcnet.scenario)
    op = _op(rpcnet, address)
    for member in dict.fromkeys(esc.slots):
        host = _host(rpcnet, member, op)
        host.payloads(esc.protocol_version, esc.escrow_id, [iid], validator="x", epoch=esc.epoch_index,
                      members=esc.slots)
        base = rpcnet.host_url(member)
        assert host.payload_url(esc.protocol_version, esc.escrow_id, iid) == (
            f"{base}{rpc_base(esc.protocol_version, esc.escrow_id)}#{iid}" if member in rpcnet.app.options.rpc_hosts
            else f"{base}/devshard/{esc.protocol_version}/sessions/{esc.escrow_id}/payloads?inference_id={iid}")


def test_a_stale_attach_timestamp_is_refused(rpcnet):
    scn = rpcnet.scenario
    address, esc, _ = _case(scn)
    host = rpcnet.app.options.rpc_hosts[0]
    op = _op(rpcnet, address)
    for skew in (-35, 35):
        r = _post_attach(rpcnet, esc, host, _attach_body(host, address, op, int(time.time()) + skew, bytes(16)))
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
        drift = re.fullmatch(r"timestamp drift (\d+)s exceeds maximum 30s", r.json()["message"])
        # the time the request takes to reach the host's clock widens a past stamp's drift (seconds on a busy
        # machine) and narrows a future one's
        assert drift and (35 <= int(drift[1]) <= 60 if skew < 0 else 30 < int(drift[1]) <= 35), r.json()
    # the client's own clock off by a minute: the Attach is refused, and said so
    rpc = ConnectPayloads(Fetcher(rpcnet.host_url(host), policy=FAST, client=FastClient()), host, op,
                          clock=lambda: time.time() - 60)
    with pytest.raises(FetchError, match=r"Connect Attach as \S+ refused: HTTP 401.*timestamp drift"):
        rpc.payload(esc.protocol_version, esc.escrow_id, 1, esc.epoch_index)


def test_a_wrong_key_is_refused_at_attach_and_at_get_payload(rpcnet):
    scn = rpcnet.scenario
    address, esc, iid = _case(scn)
    host = rpcnet.app.options.rpc_hosts[0]
    stranger = Operator(address, bytes.fromhex("11" * 32))
    r = _post_attach(rpcnet, esc, host, _attach_body(host, address, stranger, int(time.time()), b"\x07" * 16))
    assert (r.status_code, r.json()["code"]) == (401, "unauthenticated")
    assert r.json()["message"] == "recovered address unknown does not match peer_address"
    # a member's key under another member's name: recovered, but not the named peer
    other = next(m for m in esc.slots if m != address)
    r = _post_attach(rpcnet, esc, host, _attach_body(host, other, _op(rpcnet, address), int(time.time()), b"\x08" * 16))
    assert r.json()["message"] == f"recovered address {address} does not match peer_address"
    # a host name that is not the host's own
    r = _post_attach(rpcnet, esc, host, _attach_body(other if other != host else address, address,
                                                     _op(rpcnet, address), int(time.time()), b"\x09" * 16))
    assert r.json() == {"code": "unauthenticated", "message": "host_address does not match"}
    # attached properly, then a payload request signed with a key that is not the validator address's
    good = _op(rpcnet, address)
    rpc = ConnectPayloads(Fetcher(rpcnet.host_url(host), policy=FAST, client=FastClient()), host, good)
    assert rpc.payload(esc.protocol_version, esc.escrow_id, iid, esc.epoch_index) == esc.log.payloads[iid]
    rpc.operator = Operator(address, bytes.fromhex("22" * 32))
    with pytest.raises(FetchError, match="invalid signature") as exc:
        rpc.payload(esc.protocol_version, esc.escrow_id, iid, esc.epoch_index)
    assert exc.value.status == 401


def test_the_session_is_renewed_on_expiry_and_on_401(rpcnet):
    scn = rpcnet.scenario
    address, esc, iid = _case(scn)
    host = rpcnet.app.options.rpc_hosts[0]
    rpc = ConnectPayloads(Fetcher(rpcnet.host_url(host), policy=FAST, client=FastClient()), host,
                          _op(rpcnet, address))
    want = esc.log.payloads[iid]
    assert rpc.payload(esc.protocol_version, esc.escrow_id, iid, esc.epoch_index) == want
    assert rpc.payload(esc.protocol_version, esc.escrow_id, iid, esc.epoch_index) == want
    token, expires = rpc._tokens[esc.protocol_version]
    assert rpc.attaches == 1 and expires >= time.time() + 250  # the host's five minutes, as it answered them
    # the token within the renewal margin of its expires_at: a new Attach before the call
    rpc._tokens[esc.protocol_version] = (token, time.time() + 10)
    assert rpc.payload(esc.protocol_version, esc.escrow_id, iid, esc.epoch_index) == want
    assert rpc.attaches == 2 and rpc._tokens[esc.protocol_version][0] != token
    with rpcnet.app.peer_rpc.lock:  # the host forgets every session (a restart): the next call gets a 401
        rpcnet.app.peer_rpc.sessions.clear()
    assert rpc.payload(esc.protocol_version, esc.escrow_id, iid, esc.epoch_index) == want
    assert rpc.attaches == 3


def test_a_warm_key_attaches_under_its_own_address(rpcnet):
    scn = rpcnet.scenario
    address, esc, iid = _case(scn)
    host = rpcnet.app.options.rpc_hosts[0]
    warm = Operator(scn.keys.warm_of(address), scn.keys.secret_of(scn.keys.warm_of(address)), member=address)
    rpc = ConnectPayloads(Fetcher(rpcnet.host_url(host), policy=FAST, client=FastClient()), host, warm)
    assert rpc.payload(esc.protocol_version, esc.escrow_id, iid, esc.epoch_index) == esc.log.payloads[iid]


def test_a_retired_route_without_connect_or_without_a_key_is_a_clear_diagnosis(rpcnet):
    scn = rpcnet.scenario
    address, esc, iid = _case(scn)
    retired = rpcnet.app.options.retired_hosts[0]
    other = next(e for e in scn.escrows.values() if retired in e.slots)
    diagnoses: list = []
    host = _host(rpcnet, retired, _op(rpcnet, retired), diagnoses)
    got = host.payloads(other.protocol_version, other.escrow_id, [1, 2], validator="x", epoch=other.epoch_index,
                        members=other.slots)
    assert host.route == "none" and all(isinstance(g, FetchError) and not g.transient for g in got)
    assert len(diagnoses) == 1
    source, url, message, transient = diagnoses[0]
    assert source == f"host:{retired}" and url.endswith(f"/sessions/{other.escrow_id}/rpc") and not transient
    assert message.startswith("payload route: the HTTP payload route is retired (410 X-Devshard-Error: "
                              "http_session_retired), and the host serves no Connect RPC either (no Connect "
                              "PeerAuthService.Attach (HTTP 404)")
    # later requests to that host neither ask HTTP again nor repeat the diagnosis
    host.payloads(other.protocol_version, other.escrow_id, [3], validator="x", epoch=other.epoch_index,
                  members=other.slots)
    assert len(diagnoses) == 1
    # a new host read without operator mode: Connect needs a key, and the diagnosis says so
    diagnoses.clear()
    new = rpcnet.app.options.rpc_hosts[0]
    host = _host(rpcnet, new, None, diagnoses)
    got = host.payloads(esc.protocol_version, esc.escrow_id, [iid], validator="x", epoch=esc.epoch_index)
    assert isinstance(got[0], FetchError) and got[0].status == 410
    assert [d[2] for d in diagnoses] == [
        "payload route: the HTTP payload route is retired (410 X-Devshard-Error: http_session_retired); payloads "
        "are served only over Connect RPC, which needs operator mode (GONKA_OPERATOR_ADDRESS, "
        "GONKA_OPERATOR_KEY_FILE): this host's payloads stay unknown"]


class _LoseFirstAttach(httpx.BaseTransport):
    """Forwards to the devnet, but answers the first Attach the host took with a 503 (a proxy losing the answer):
    the host has used that nonce. Every Attach body sent is kept."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.attach_bodies: list[dict] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = self.inner.handle_request(request)
        if request.url.path.endswith(ATTACH_PROCEDURE):
            self.attach_bodies.append(json.loads(request.content))
            if len(self.attach_bodies) == 1:
                resp.read()
                resp.close()
                return httpx.Response(503, text="upstream connect error or disconnect/reset before headers")
        return resp


def test_an_attach_whose_answer_is_lost_is_sent_again_with_a_new_nonce(rpcnet):
    """Resending the same Attach body would meet "attach_nonce already in use" (403): each attempt is a new body."""
    scn = rpcnet.scenario
    address, esc, iid = _case(scn)
    host = rpcnet.app.options.rpc_hosts[0]
    transport = _LoseFirstAttach()
    with httpx.Client(transport=transport) as client:
        rpc = ConnectPayloads(Fetcher(rpcnet.host_url(host), policy=FAST, client=client), host, _op(rpcnet, address))
        assert rpc.payload(esc.protocol_version, esc.escrow_id, iid, esc.epoch_index) == esc.log.payloads[iid]
    nonces = [b["attachNonce"] for b in transport.attach_bodies]
    assert len(nonces) == 2 and nonces[0] != nonces[1] and rpc.attaches == 1


def test_an_attach_refusal_is_transient_for_the_payloads_behind_it(rpcnet):
    """A refused Attach says nothing about the payloads: each id ends transient (the poller asks the next member,
    and stores no "no payload" for it), and the rest of the batch is not asked of this host again."""
    scn = rpcnet.scenario
    address, esc, iid = _case(scn)
    new = rpcnet.app.options.rpc_hosts[0]
    used = b"\x5a" * 16
    first = ConnectPayloads(Fetcher(rpcnet.host_url(new), policy=FAST, client=FastClient()), new,
                            _op(rpcnet, address), nonce=lambda n: used)
    assert first.payload(esc.protocol_version, esc.escrow_id, iid, esc.epoch_index) == esc.log.payloads[iid]
    host = _host(rpcnet, new, _op(rpcnet, address))
    host.rpc.nonce = lambda n: used  # the host refuses it: attach_nonce already in use
    got = host.payloads(esc.protocol_version, esc.escrow_id, [iid, iid + 1], validator="x", epoch=esc.epoch_index,
                        members=esc.slots)
    assert [type(g).__name__ for g in got] == ["AttachRefused", "AttachRefused"]
    assert all(g.transient and g.status == 403 for g in got)
    assert "Connect Attach as" in str(got[0]) and "attach_nonce already in use" in str(got[0])
    assert host.rpc.attaches == 0


# -- start-up check: the key file's key belongs to the configured address or a grantee of it ---------------------

def _chain(net) -> ChainRest:
    return ChainRest(Fetcher(net.chain_rest_url, policy=FAST, client=FastClient()))


def test_the_key_of_the_configured_address_or_of_its_grantee_passes(rpcnet):
    scn = rpcnet.scenario
    address = scn.hosts[0].address
    own = _op(rpcnet, address)
    assert check_operator_key(own, _chain(rpcnet)) == address and own.peer_address == address
    warm_named = _op(rpcnet, scn.keys.warm_of(address))
    assert check_operator_key(warm_named, _chain(rpcnet)) == scn.keys.warm_of(address)
    # the cold address configured, the warm key in the file: a grantee, and Attach will name the warm address
    cold_with_warm = _op(rpcnet, address, key_of=scn.keys.warm_of(address))
    assert check_operator_key(cold_with_warm, _chain(rpcnet)) == scn.keys.warm_of(address)
    assert cold_with_warm.peer_address == scn.keys.warm_of(address)


def test_a_key_of_someone_else_stops_the_start_naming_both_addresses(rpcnet):
    scn = rpcnet.scenario
    address, other = scn.hosts[0].address, scn.hosts[1].address
    wrong = _op(rpcnet, address, key_of=other)
    with pytest.raises(OperatorConfigError) as exc:
        check_operator_key(wrong, _chain(rpcnet))
    message = str(exc.value)
    assert "\n" not in message and address in message and wrong.key_address in message
    assert scn.keys.secret_of(other).hex() not in message


def test_a_warm_address_must_be_a_grantee_of_the_member_it_acts_for(rpcnet):
    scn = rpcnet.scenario
    a, b = scn.hosts[0].address, scn.hosts[1].address
    right = Operator(scn.keys.warm_of(a), scn.keys.secret_of(scn.keys.warm_of(a)), member=a)
    assert check_operator_key(right, _chain(rpcnet)) == scn.keys.warm_of(a)
    wrong = Operator(scn.keys.warm_of(a), scn.keys.secret_of(scn.keys.warm_of(a)), member=b)
    with pytest.raises(OperatorConfigError) as exc:
        check_operator_key(wrong, _chain(rpcnet))
    assert str(exc.value) == (f"GONKA_OPERATOR_MEMBER {b}: GONKA_OPERATOR_ADDRESS {scn.keys.warm_of(a)} is not a grantee "
                              "of it for /inference.inference.MsgStartInference, so hosts would not count it as "
                              "that member")


def test_a_key_whose_own_address_is_configured_needs_no_chain_read():
    op = Operator("unused", bytes.fromhex("33" * 32))
    op = Operator(op.key_address, bytes.fromhex("33" * 32))

    class NoChain:
        http = None  # any read would fail

    assert check_operator_key(op, NoChain()) == op.key_address  # type: ignore[arg-type]


def test_attach_refused_or_not_a_member_is_said_per_host(rpcnet):
    scn = rpcnet.scenario
    address, esc, iid = _case(scn)
    new = rpcnet.app.options.rpc_hosts[0]
    diagnoses: list = []
    host = _host(rpcnet, new, Operator(address, bytes.fromhex("11" * 32)), diagnoses)
    got = host.payloads(esc.protocol_version, esc.escrow_id, [iid, iid], validator="x", epoch=esc.epoch_index,
                        members=esc.slots)
    assert all(isinstance(g, FetchError) and g.status == 401 for g in got)
    assert host.rpc.attaches == 0 and len(diagnoses) == 1
    assert diagnoses[0][2].startswith("payload route: Connect RPC (the HTTP payload route is retired (410 "
                                      "X-Devshard-Error: http_session_retired)); Connect Attach as "
                                      f"{address} refused: HTTP 401")
    # an escrow whose group does not hold the operator: no Attach is tried (the host would refuse it)
    new, outside = next((h, e) for h in rpcnet.app.options.rpc_hosts for e in scn.escrows.values()
                        if h in e.slots and address not in e.slots)
    host = _host(rpcnet, new, _op(rpcnet, address))
    got = host.payloads(outside.protocol_version, outside.escrow_id, [1], validator="x",
                        epoch=outside.epoch_index, members=outside.slots)
    assert "the operator is not in escrow" in str(got[0]) and host.rpc.attaches == 0


def _mock_host(handler, op: Operator | None, diagnoses: list) -> DevshardHost:
    fetcher = Fetcher("http://host.test", policy=FAST, client=httpx.Client(transport=httpx.MockTransport(handler)))
    return DevshardHost("gonka1host", fetcher, operator=op, on_diagnosis=lambda *a: diagnoses.append(a))


def test_a_410_without_the_retired_code_is_said_and_not_taken_for_connect():
    diagnoses: list = []
    host = _mock_host(lambda request: httpx.Response(410, json={"message": "gone"}), None, diagnoses)
    got = host.payloads("v5", "7", [1, 2], validator="x", epoch=3)
    assert host.route == "http" and all(isinstance(g, FetchError) and g.status == 410 for g in got)
    assert [d[2] for d in diagnoses] == [
        'payload route answered 410 without X-Devshard-Error: http_session_retired: HTTP 410: {"message":"gone"} '
        "(http://host.test/devshard/v5/sessions/7/payloads?inference_id=1)"]


def test_connect_answers_of_the_wrong_shape_are_refused():
    op = Operator("gonka1op", bytes.fromhex("44" * 32))

    def answers(attach: dict, payload: dict):
        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/payloads"):
                return httpx.Response(410, json={"message": "retired"}, headers={"X-Devshard-Error":
                                                                                  "http_session_retired"})
            if request.url.path.endswith("/Attach"):
                return httpx.Response(200, json=attach)
            return httpx.Response(200, json=payload)
        return handler

    diagnoses: list = []
    token = {"sessionToken": base64.b64encode(bytes(16)).decode(), "expiresAt": str(int(time.time()) + 300)}
    host = _mock_host(answers({}, {}), op, diagnoses)
    got = host.payloads("v5", "7", [1], validator="x", epoch=3, members=["gonka1op"])
    assert isinstance(got[0], FetchError) and "Attach answer without a session token" in str(got[0])
    host = _mock_host(answers(token, {"responsePayload": 5}), op, diagnoses)
    got = host.payloads("v5", "7", [1], validator="x", epoch=3, members=["gonka1op"])
    assert isinstance(got[0], PayloadShapeError) and "responsePayload is a JSON int" in str(got[0])
    host = _mock_host(answers(token, {"responsePayload": base64.b64encode(b"\xff").decode()}), op, diagnoses)
    got = host.payloads("v5", "7", [1], validator="x", epoch=3, members=["gonka1op"])
    assert isinstance(got[0], PayloadShapeError) and "not UTF-8" in str(got[0])
    host = _mock_host(answers(token, {"inferenceId": "1"}), op, diagnoses)  # stored none: proto3 JSON omits it
    assert host.payloads("v5", "7", [1], validator="x", epoch=3, members=["gonka1op"]) == [None]


def test_an_unknown_configured_address_with_a_foreign_key_is_refused(rpcnet):
    op = Operator("gonka1nosuchaccount", bytes.fromhex("55" * 32))
    with pytest.raises(OperatorConfigError, match="gonka1nosuchaccount"):
        check_operator_key(op, _chain(rpcnet))

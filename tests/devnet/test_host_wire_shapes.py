"""Devshard host routes as the chain's code writes them (tests/cases/fixtures/mainnet/README.md, "Shapes without a
capture"), where the devnet had served flattened shapes the indexer then read as it wrote them:

* the payload response, Go ``[]byte`` payloads in standard base64: the parser decodes it, refuses every other
  shape, and the poller records why a payload is missing;
* a diff-log entry, ``DiffToJSON``: ``txs`` is one base64 ``DiffContent`` of the entry's nonce and txs,
  ``post_state_root`` is omitempty, and the root the host computed after the diff is ``state_hash``.

The devnet serves exactly these shapes (key sets and JSON types)."""
from __future__ import annotations

import base64
import json

import pytest

from indexer.devnet import Scenario, ScenarioConfig
from indexer.devnet.routes import App, AppOptions
from indexer.devnet.world import Devnet
from indexer.sources.gonka.host import stored_response_payload

# the body upstream's own client test serves (common/validation, FetchPayloadsHTTP): "prompt" and "resp"
UPSTREAM = '{"inference_id":"42","prompt_payload":"cHJvbXB0","response_payload":"cmVzcA==","executor_signature":"sig"}'
REFUSAL = ('{"events":["data: {\\"error\\":{\\"code\\":400,\\"message\\":\\"This model\'s maximum context length is '
           '32768 tokens.\\",\\"type\\":\\"BadRequestError\\"}}","data: [DONE]"]}')


def go_json(response: str | None, prompt: str = "{}") -> dict:
    """What encoding/json makes of PayloadResponse: []byte as standard base64, nil as null."""
    b64 = (lambda text: None if text is None else base64.b64encode(text.encode()).decode())
    return json.loads(json.dumps({"inference_id": "7", "prompt_payload": b64(prompt), "response_payload": b64(response),
                                  "executor_signature": "c2ln"}))


def test_the_upstream_example_decodes_to_its_bytes():
    assert stored_response_payload(json.loads(UPSTREAM)) == "resp"


def test_a_refusal_payload_comes_back_as_the_text_its_hash_was_taken_over():
    assert stored_response_payload(go_json(REFUSAL)) == REFUSAL
    assert stored_response_payload(go_json("")) == ""           # stored, but empty
    assert stored_response_payload(go_json(None)) is None       # nothing stored (a nil []byte)
    non_ascii = '{"error":{"message":"Längé — 超过"}}'
    assert stored_response_payload(go_json(non_ascii)) == non_ascii


@pytest.mark.parametrize("body, reason", [
    ({"response_payload": REFUSAL}, "not standard base64"),           # the payload text itself: never stored as such
    ({"response_payload": "cmVzcA"}, "not standard base64"),          # unpadded
    ({"response_payload": "cmVz_A=="}, "not standard base64"),        # URL-safe alphabet
    ({"response_payload": ["cmVzcA=="]}, "JSON list"),
    ({"prompt_payload": "cHJvbXB0"}, "expected a JSON object with response_payload"),
    (["cmVzcA=="], "expected a JSON object with response_payload"),
    ({"response_payload": base64.b64encode(b"\xff\xfe").decode()}, r"not UTF-8 text \(byte 0\)"),
])
def test_any_other_shape_is_refused_with_its_reason(body, reason):
    with pytest.raises(ValueError, match=reason):
        stored_response_payload(body)


def test_the_devnet_serves_the_real_shape():
    net = Devnet(Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=2, inferences_per_escrow=40)))
    app = App(net, AppOptions())
    esc = next(e for e in net.scenario.escrows.values() if e.log.payloads)
    iid = next(iter(esc.log.payloads))
    host = net.scenario.hosts_by_address[esc.slots[0]].name
    resp = app.handle("GET", f"/hosts/{host}/devshard/{esc.protocol_version}/sessions/{esc.escrow_id}/payloads",
                      {"inference_id": [str(iid)]}, {"X-Validator-Address": "gonka1indexer"})
    body = json.loads(resp.body)
    assert resp.status == 200
    assert {k: type(v) for k, v in body.items()} == {k: type(v) for k, v in json.loads(UPSTREAM).items()}
    assert body["inference_id"] == str(iid)
    assert stored_response_payload(body) == esc.log.payloads[iid]
    assert base64.b64decode(body["prompt_payload"], validate=True)


def test_a_host_serving_another_shape_leaves_the_payload_unknown_and_says_why(db_url, monkeypatch):
    """The poller against a devnet whose hosts answer with the payload text itself (the devnet's old flattened
    shape): no such text is stored as a payload, every 0/0 Finish keeps its record without one (and is awaited), and
    every refusal is one net.failure row per member asked, naming the URL and the reason."""
    import psycopg

    from indexer.devnet import DevnetServer
    from indexer.devnet import hostviews
    from indexer.poller import poll_once
    from indexer.sources.gonka import RetryPolicy

    def flattened(esc, inference_id):
        response = esc.log.payloads.get(inference_id)
        return None if response is None else {"inference_id": inference_id, "response_payload": response}

    monkeypatch.setattr(hostviews, "payload_json", flattened)
    scn = Scenario(ScenarioConfig(seed=7, epochs=2, escrows_per_epoch=2, inferences_per_escrow=24))
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(backoff_base=0.001, backoff_max=0.01),
                  private_hosts=True)
    with psycopg.connect(db_url) as c:
        refusals = c.execute("SELECT count(*), count(response_payload) FROM rec.finish_tx "
                             "WHERE input_tokens = 0 AND output_tokens = 0").fetchone()
        failures = c.execute("SELECT url, error, transient FROM net.failure WHERE error LIKE 'payload response:%'"
                             ).fetchall()
        kinds = {r[0] for r in c.execute("SELECT refusal_kind FROM api.context_refusals")}
        awaited = c.execute("SELECT count(*) FROM api.awaited_payloads WHERE state = 'awaited'").fetchone()[0]
    assert refusals[0] > 0 and refusals[1] == 0
    # one per member asked: a wrong shape moves the payload on to the group's next member (another member may run
    # other code), each member asked once; none served it, so every refusal is awaited for a later cycle
    assert len(failures) == len({url for url, _, _ in failures}) > refusals[0]
    assert awaited == refusals[0]
    assert all("/payloads?inference_id=" in url and not transient for url, _, transient in failures)
    assert {error for _, error, _ in failures} == {
        "payload response: response_payload is not standard base64 (Go's encoding of []byte) (" + url + ")"
        for url, _, _ in failures}
    assert kinds == {"unknown"}


def test_a_diff_entry_as_difftojson_writes_it_decodes_and_the_devnet_serves_that_shape():
    from indexer.wire.diffs import decode_diff, diff_from_host_json, encode_tx

    # DiffToJSON(d): DiffJSON{Nonce, Txs: proto.Marshal(DiffContent{Nonce, Txs}), UserSig}; diffRecordJSON adds
    # StateHash. Go JSON: the nonce a number, every []byte standard base64, post_state_root omitted when empty
    # (as here: the witness check then compares state_hash).
    txs = [{"heartbeat": {}}, {"confirm_start": {"inference_id": 9}}]
    raw = b"".join(b"\x12" + bytes([len(t)]) + t for t in (encode_tx(tx, "v5") for tx in txs))
    entry = {"diff": {"nonce": 7, "txs": base64.b64encode(b"\x08\x07" + raw).decode(),
                      "user_sig": base64.b64encode(b"u" * 65).decode()},
             "state_hash": base64.b64encode(b"r" * 32).decode()}
    got = diff_from_host_json(json.loads(json.dumps(entry)), "v5")
    assert [got["nonce"], [next(iter(tx)) for tx in got["txs"]]] == [7, ["heartbeat", "confirm_start"]]
    assert got["txs"][1]["confirm_start"]["inference_id"] == 9
    assert (got["state_hash"], got["post_state_root"], got["user_sig"]) == (b"r" * 32, b"", b"u" * 65)
    assert decode_diff(got["raw_content"], "v5")["nonce"] == 7

    net = Devnet(Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=1, inferences_per_escrow=20)))
    esc = next(iter(net.scenario.escrows.values()))
    host = net.scenario.hosts_by_address[esc.slots[0]].name
    resp = App(net, AppOptions()).handle(
        "GET", f"/hosts/{host}/devshard/{esc.protocol_version}/sessions/{esc.escrow_id}/diffs",
        {"from": ["1"], "to": ["3"]}, {})
    served = json.loads(resp.body)
    assert resp.status == 200 and len(served) == 3
    go_types = {"nonce": int, "txs": str, "user_sig": str, "post_state_root": str}  # DiffJSON, omitempty root
    assert all(set(e) == {"diff", "state_hash"} and isinstance(e["state_hash"], str)
               and {k: type(v) for k, v in e["diff"].items()} == go_types for e in served)
    assert all(decode_diff(base64.b64decode(e["diff"]["txs"], validate=True), esc.protocol_version)["nonce"]
               == e["diff"]["nonce"] for e in served)

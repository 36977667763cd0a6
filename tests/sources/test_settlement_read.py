"""The settlement transaction read for the settled check (indexer.sources.gonka.settlements): the RPC's TxRaw kept
and checked against the event's hash, the REST JSON as a stated re-encoding, lying and forgetful nodes. The
transaction wraps the golden MsgSettleDevshardEscrow (/work/shared/data/upstream-vectors/settle-msg-goldens/)."""
from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from indexer.sources.gonka import ChainRest, CometRpc, Fetcher, FetchError, RetryPolicy
from indexer.sources.gonka.settlements import is_final, read_settlement
from indexer.verify import proto as pb, settlement as st

GOLDEN = base64.b64decode(
    Path("/work/shared/data/upstream-vectors/settle-msg-goldens/settle_msg_full.b64").read_text().strip())
TX_RAW = pb.concat((pb.f_bytes(1, pb.f_msg(1, pb.f_str(1, st.SETTLE_TYPE_URL) + pb.f_bytes(2, GOLDEN))),
                    pb.f_bytes(2, b"auth-info"), pb.f_bytes(3, b"s" * 64)))
HASH = st.tx_hash(TX_RAW)
HEIGHT = 5210


def _rpc_tx(raw: bytes = TX_RAW, height: int = HEIGHT, code: int = 0) -> dict:
    return {"jsonrpc": "2.0", "id": -1, "result": {"hash": HASH, "height": str(height), "index": 0,
                                                   "tx_result": {"code": code}, "tx": base64.b64encode(raw).decode()}}


NOT_FOUND = httpx.Response(500, json={"jsonrpc": "2.0", "id": -1, "error": {
    "code": -32603, "message": "Internal error", "data": f"tx ({HASH}) not found"}})


def _rest_tx(**extra) -> dict:
    m = st.decode_settle_msg(GOLDEN)
    msg = {"@type": st.SETTLE_TYPE_URL, "settler": m.settler, "escrow_id": str(m.escrow_id),
           "state_root": base64.b64encode(m.state_root).decode(), "nonce": str(m.nonce),
           "rest_hash": base64.b64encode(m.rest_hash).decode(),
           "host_stats": [{"slot_id": h.slot_id, "missed": h.missed, "invalid": h.invalid, "cost": str(h.cost),
                           "required_validations": h.required_validations,
                           "completed_validations": h.completed_validations} for h in m.host_stats],
           "signatures": [{"slot_id": s.slot_id, "signature": base64.b64encode(s.signature).decode()}
                          for s in m.signatures], "fees": str(m.fees), "version": m.version, **extra}
    return {"tx": {"body": {"messages": [msg]}}, "tx_response": {"height": str(HEIGHT), "txhash": HASH, "code": 0}}


def _status(earliest: int) -> dict:
    return {"jsonrpc": "2.0", "id": -1, "result": {"sync_info": {
        "latest_block_height": str(HEIGHT + 10**6), "earliest_block_height": str(earliest)}}}


def _clients(rpc_answers: dict[str, list], rest_answer=None, earliest: dict[str, int] | None = None):
    """An RPC with nodes ``rpc_answers`` (node → answers in turn) and a REST node; what each was asked, and the
    failures recorded. ``earliest``: each node's earliest kept block (CometBFT status; a node left out answers
    its status with a 503)."""
    asked: list[str] = []
    failures: list[tuple] = []

    def handler(req: httpx.Request) -> httpx.Response:
        asked.append(f"{req.url.host}{req.url.path}")
        if req.url.host == "rest":
            return rest_answer if isinstance(rest_answer, httpx.Response) else httpx.Response(200, json=rest_answer)
        if req.url.path == "/status":
            kept = (earliest or {}).get(req.url.host)
            return httpx.Response(503, text="no status") if kept is None else httpx.Response(200, json=_status(kept))
        assert req.url.params["hash"].startswith("0x")
        answer = rpc_answers[req.url.host].pop(0)
        return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)

    kw = dict(policy=RetryPolicy(attempts=1, sleep=lambda s: None),
              client=httpx.Client(transport=httpx.MockTransport(handler)),
              on_failure=lambda u, e, t: failures.append((u, e)))
    rpc = CometRpc(Fetcher([f"http://{n}" for n in rpc_answers], name="rpc", **kw))
    return rpc, ChainRest(Fetcher(["http://rest"], name="chain", **kw)), asked, failures


def test_the_rpc_transaction_is_kept_as_broadcast():
    rpc, chain, asked, _ = _clients({"a": [_rpc_tx()]})
    rec = read_settlement(rpc, chain, "123", HASH.lower(), HEIGHT)
    assert asked == ["a/tx"]
    assert rec == {
        "kind": "settlement", "escrow_id": "123", "tx_hash": HASH.lower(), "height": HEIGHT,
        "settler": "gonka1settler0000000000000000000000000", "state_root": b"fixed-state-root-32-bytes-long!".hex(),
        "rest_hash": b"fixed-rest-hash-bytes".hex(), "nonce": 456, "fees": 789, "state_root_and_protocol_version":
        "v1.2.3", "host_stats": {
            "1": {"missed": 2, "invalid": 3, "cost": 400, "required_validations": 5, "completed_validations": 6},
            "7": {"missed": 8, "invalid": 9, "cost": 1000, "required_validations": 11, "completed_validations": 12}},
        "signatures": {"1": b"fixed-signature-one".hex(), "7": b"fixed-signature-two".hex()},
        "msg": base64.b64encode(GOLDEN).decode(), "tx_raw": base64.b64encode(TX_RAW).decode(), "msg_source": "tx"}
    assert is_final(rec)


def test_a_node_serving_other_bytes_is_recorded_and_the_next_node_asked():
    forged = TX_RAW.replace(b"s" * 64, b"t" * 64)
    rpc, chain, asked, failures = _clients({"a": [_rpc_tx(forged)], "b": [_rpc_tx()]})
    rec = read_settlement(rpc, chain, "123", HASH, HEIGHT)
    assert rec["tx_raw"] == base64.b64encode(TX_RAW).decode() and asked == ["a/tx", "b/tx"]
    assert failures == [("http://a/tx", f"the TxRaw served for {HASH} hashes to {st.tx_hash(forged)} (http://a/tx)")]
    assert rpc.http.base_urls[0] == "http://b"  # the lying node is asked last from now on


def test_another_height_is_a_lie_too():
    rpc, chain, _, failures = _clients({"a": [_rpc_tx(height=HEIGHT + 1)]}, {"tx_response": {}})
    with pytest.raises(FetchError, match=f"served at height {HEIGHT + 1}, the settlement event is at height {HEIGHT}"):
        read_settlement(rpc, chain, "123", HASH, HEIGHT)
    assert len(failures) == 1


REST_SOURCE = (f"msg re-encoded from the REST JSON of /cosmos/tx/v1beta1/txs/{HASH}, not the signed bytes; tx_raw "
               "not available (no RPC node served /tx)")


def test_without_the_block_at_any_rpc_node_the_rest_json_is_re_encoded_and_says_so():
    rpc, chain, asked, failures = _clients({"a": [NOT_FOUND], "b": [NOT_FOUND]}, _rest_tx(),
                                           earliest={"a": HEIGHT + 1, "b": HEIGHT + 500})
    rec = read_settlement(rpc, chain, "123", HASH, HEIGHT)
    # every node asked once, no retries; then each node's earliest kept block
    assert asked == ["a/tx", "b/tx", f"rest/cosmos/tx/v1beta1/txs/{HASH}", "a/status", "b/status"]
    assert rec["msg"] == base64.b64encode(GOLDEN).decode()  # deterministic: here the re-encoding is the golden
    assert rec["tx_raw"] is None and rec["nonce"] == 456 and rec["signatures"]["7"] == b"fixed-signature-two".hex()
    assert rec["msg_source"] == REST_SOURCE
    # no node keeps the block: this is the last reading there can be, and it says so
    assert is_final(rec) and rec["tx_pruned"] == (
        f"every RPC node answered /tx not found and keeps no block at height {HEIGHT} (http://a: earliest block "
        f"{HEIGHT + 1}; http://b: earliest block {HEIGHT + 500}): this re-encoding is kept and the transaction is "
        "not asked for again")
    assert failures == []


@pytest.mark.parametrize("earliest", [
    {"a": HEIGHT + 1, "b": HEIGHT},  # b keeps the block: its tx index lags, it may serve the tx on a later cycle
    {"a": HEIGHT + 1},  # b's status is not read: nothing shows the block gone there
    {"a": 1, "b": 1},  # both keep the block: not found is a tx index behind (or a load balancer's lagging node)
])
def test_a_not_found_from_a_node_that_may_keep_the_block_leaves_the_rest_reading_open(earliest):
    rpc, chain, _, failures = _clients({"a": [NOT_FOUND], "b": [NOT_FOUND]}, _rest_tx(), earliest=earliest)
    rec = read_settlement(rpc, chain, "123", HASH, HEIGHT)
    assert rec["msg_source"] == REST_SOURCE and "tx_pruned" not in rec and not is_final(rec)
    # why /tx gave nothing is in the failure log, not in the record
    told = [e for u, e in failures if "read over REST only" in e]
    assert len(told) == 1 and f"tx ({HASH}) not found" in told[0] and "escrow 123" in told[0]


def test_the_rest_reading_is_the_same_whatever_the_rpc_answered():
    """A REST record that quoted the RPC's error would change with each error: an amendment, a new revision and a
    replay of its escrow on every cycle."""
    reads = []
    for answers in ({"a": [UNAVAILABLE]}, {"a": [NOT_FOUND]}, {"a": [httpx.Response(502, text="bad gateway")]}):
        rpc, chain, _, failures = _clients(answers, _rest_tx(), earliest={"a": 1})
        reads.append(read_settlement(rpc, chain, "123", HASH, HEIGHT))
        assert any("read over REST only" in e for _, e in failures)
    assert reads[0] == reads[1] == reads[2] and not is_final(reads[0])


def test_a_rest_field_the_encoder_does_not_know_is_named():
    rpc, chain, _, _ = _clients({"a": [NOT_FOUND]}, _rest_tx(sealed_bonus="7"))
    rec = read_settlement(rpc, chain, "123", HASH, HEIGHT)
    assert rec["msg_source"] == REST_SOURCE + "; fields left out of the re-encoding: sealed_bonus"


@pytest.mark.parametrize("rest, reason", [
    (httpx.Response(404, json={"code": 5, "message": f"tx not found: {HASH}"}), "HTTP 404"),
    ({"tx_response": {"txhash": "AB" * 32, "height": str(HEIGHT)}}, "the answer is for tx"),
    (_rest_tx(escrow_id="124"), "carries 0 MsgSettleDevshardEscrow for escrow 123"),
    (_rest_tx(state_root="not base64!"), "state_root: not strict base64"),
])
def test_unread_everywhere_is_a_transient_failure_naming_both_reasons(rest, reason):
    rpc, chain, _, _ = _clients({"a": [NOT_FOUND]}, rest)
    with pytest.raises(FetchError) as err:
        read_settlement(rpc, chain, "123", HASH, HEIGHT)
    assert err.value.transient and err.value.url == "escrow:123"
    assert f"settlement tx {HASH} not read: RPC /tx: HTTP 500" in str(err.value) and reason in str(err.value)


@pytest.mark.parametrize("raw, reason", [
    (pb.f_bytes(1, pb.f_msg(1, pb.f_str(1, st.SETTLE_TYPE_URL) + pb.f_bytes(2, GOLDEN.replace(
        pb.f_uint(2, 123), pb.f_uint(2, 124))))), "the transaction carries 0 MsgSettleDevshardEscrow for escrow 123 "
     "(of 1 settlement messages), expected one"),
    (b"devnet-tx-not-a-TxRaw", "field 12 at offset 0: unsupported wire type 4"),
])
def test_a_read_transaction_without_this_escrows_settlement_is_kept_with_the_reason(raw, reason):
    """Its bytes are the named transaction's: no later read can change them, so the record is final, not pending."""
    rpc, chain, asked, _ = _clients({"a": [_rpc_tx(raw)]})
    rec = read_settlement(rpc, chain, "123", st.tx_hash(raw), HEIGHT)
    assert rec == {"kind": "settlement", "escrow_id": "123", "tx_hash": st.tx_hash(raw).lower(), "height": HEIGHT,
                   "msg": None, "tx_raw": base64.b64encode(raw).decode(), "msg_source": "tx", "msg_unreadable": reason}
    assert is_final(rec)
    assert asked == ["a/tx"]


UNAVAILABLE = httpx.Response(503, text="upstream connect error")


@pytest.mark.parametrize("answers", [
    {"a": [UNAVAILABLE]},  # a transient failure
    {"a": [NOT_FOUND], "b": [UNAVAILABLE]},  # one node lacks it, another may have it once it answers
    {"a": [_rpc_tx(TX_RAW.replace(b"s" * 64, b"t" * 64))]},  # a lying node
    {"a": [{"jsonrpc": "2.0", "id": -1, "result": {"height": "1"}}]},  # an answer without the tx
])
def test_a_rest_reading_while_an_rpc_node_may_still_serve_the_tx_is_not_final(answers):
    rpc, chain, asked, _ = _clients(answers, _rest_tx())
    rec = read_settlement(rpc, chain, "123", HASH, HEIGHT)
    assert rec["tx_raw"] is None and rec["msg_source"] == REST_SOURCE
    assert "tx_pruned" not in rec and not is_final(rec)  # the poller asks /tx again on its next cycle
    assert [a for a in asked if a.endswith("/tx")] == [f"{n}/tx" for n in answers]  # every node asked once


def test_the_lie_names_the_node_that_told_it_not_the_one_first_in_line():
    """Node a fails (5xx), node b serves other bytes: the lie is b's, recorded as b's, and b goes last."""
    forged = TX_RAW.replace(b"s" * 64, b"t" * 64)
    rpc, chain, asked, failures = _clients({"a": [UNAVAILABLE], "b": [_rpc_tx(forged)], "c": [_rpc_tx()]})
    rec = read_settlement(rpc, chain, "123", HASH, HEIGHT)
    assert rec["tx_raw"] == base64.b64encode(TX_RAW).decode() and asked == ["a/tx", "b/tx", "c/tx"]
    lies = [f for f in failures if "hashes to" in f[1]]
    assert lies == [("http://b/tx", f"the TxRaw served for {HASH} hashes to {st.tx_hash(forged)} (http://b/tx)")]
    assert rpc.http.urls() == ["http://c", "http://a", "http://b"]  # the answering node first, the liar last


class _GuardedList(list):
    """A base URL list that fails any reordering made without its Fetcher's lock held."""

    def __init__(self, items, fetcher):
        super().__init__(items)
        self.fetcher = fetcher

    def _check(self):
        lock = getattr(self.fetcher, "_order", None)
        assert lock is not None and lock.locked(), "base_urls reordered without the Fetcher's lock"

    def remove(self, x):
        self._check()
        super().remove(x)

    def insert(self, i, x):
        self._check()
        super().insert(i, x)

    def append(self, x):
        self._check()
        super().append(x)

    def pop(self, i=-1):
        self._check()
        return super().pop(i)


def test_the_shared_node_list_is_reordered_only_under_its_lock():
    """Escrow workers read settlements on one RPC Fetcher at once: a reordering without the lock beside another
    thread's (the Fetcher moving the answering node first) can raise ValueError, read as a failed /tx."""
    forged = TX_RAW.replace(b"s" * 64, b"t" * 64)
    rpc, chain, _, _ = _clients({"a": [_rpc_tx(forged)], "b": [UNAVAILABLE], "c": [_rpc_tx()]}, _rest_tx())
    rpc.http.base_urls = _GuardedList(rpc.http.base_urls, rpc.http)
    rec = read_settlement(rpc, chain, "123", HASH, HEIGHT)
    assert rec["msg_source"] == "tx" and rpc.http.urls() == ["http://c", "http://a", "http://b"]


@pytest.mark.parametrize("answer, field", [
    (["not", "an", "object"], "answer: expected an object, got list"),
    ({"tx_response": "x"}, "tx_response: expected an object, got str"),
    ({**_rest_tx(), "tx": "x"}, "tx: expected an object, got str"),
    ({**_rest_tx(), "tx": {"body": ["x"]}}, "tx.body: expected an object, got list"),
    ({**_rest_tx(), "tx": {"body": {"messages": "x"}}}, "tx.body.messages: expected an array, got str"),
    (_rest_tx(host_stats=["x"]), "host_stats[0]: expected an object, got str"),
    (_rest_tx(host_stats={"slot_id": 1}), "host_stats: expected an array, got dict"),
    (_rest_tx(signatures=[7]), "signatures[0]: expected an object, got int"),
])
def test_a_rest_answer_of_the_wrong_shape_is_a_failure_naming_its_field_and_url(answer, field):
    rpc, chain, _, _ = _clients({"a": [NOT_FOUND]}, answer)
    with pytest.raises(FetchError) as err:
        read_settlement(rpc, chain, "123", HASH, HEIGHT)
    text = str(err.value)
    assert err.value.transient and "\n" not in text
    assert f"{field} (http://rest/cosmos/tx/v1beta1/txs/{HASH})" in text, text

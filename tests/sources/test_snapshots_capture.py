"""snapshots.capture_epoch against a node that serves the mainnet captures (httpx.MockTransport, no sockets): the
records it builds, the pruned-height fallback with cosmos-sdk's real error, and every failed read named."""
from __future__ import annotations

import json

import httpx

from indexer.sources.gonka import Fetcher, RetryPolicy
from indexer.sources.gonka.chain import PREFIX, ChainRest
from indexer.sources.gonka.snapshots import capture_epoch
from indexer.wire.normalize import dumps_record
from tests.support.mainnet_fixtures import raw

QWEN = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
KNOWN = "gonka10mmdjau4dnj8krs7sh7t7635ttnmq9u3vqgz09"
END_267 = 4136542
LIVE = 5660000
ROUTELESS = "gonka15munkmx6x7k6rqqeexjet4556p7at39ks9qgr5"  # whose grants read answers grpc-gateway's 404


def served(req: httpx.Request, resp: httpx.Response) -> httpx.Response:
    """``resp`` with the height cosmos-sdk says it served (the one asked for, else the latest), as a node's
    gateway answers every query."""
    resp.headers["Grpc-Metadata-X-Cosmos-Block-Height"] = req.headers.get("x-cosmos-block-height") or str(LIVE)
    return resp


def _node(requests: list):
    def handler(req: httpx.Request) -> httpx.Response:
        path = req.url.path.removeprefix(PREFIX)
        height = req.headers.get("x-cosmos-block-height")
        requests.append((path, req.url.params.get("model_id"), height))
        if path == "/epoch_group_data/267":
            model = req.url.params.get("model_id")
            if model is None:
                return httpx.Response(200, content=raw("epoch_group_data_267.json"))
            if model == "moonshotai/Kimi-K2.6":
                return httpx.Response(200, content=raw("epoch_group_data_267_model_moonshotai_Kimi-K2.6.json"))
            return httpx.Response(500, json={"code": 13, "message": "internal", "details": []})
        if path == "/params":
            if height is not None:
                return httpx.Response(500, json={"code": 2, "details": [], "message": (
                    f"failed to load state at height {height}; version does not exist (latest height: {LIVE}): "
                    "not found")})
            return httpx.Response(200, content=raw("params_e366.json"),
                                  headers={"Grpc-Metadata-X-Cosmos-Block-Height": str(LIVE)})
        if path == "/excluded_participants/267":
            return httpx.Response(200, json={"items": []})
        if path == f"/epoch_performance_summary/267/{KNOWN}":
            return httpx.Response(200, content=raw(
                "epoch_performance_summary_267_gonka10mmdjau4dnj8krs7sh7t7635ttnmq9u3vqgz09.json"))
        return httpx.Response(404, json={"code": 5, "message": "not found", "details": []})
    return handler


def test_capture_of_epoch_267():
    requests: list = []
    sleeps: list = []
    fetcher = Fetcher("http://node", policy=RetryPolicy(attempts=2, sleep=sleeps.append),
                      client=httpx.Client(transport=httpx.MockTransport(_node(requests))))
    cap = capture_epoch(ChainRest(fetcher), 267, ended=True)
    kinds = [r["kind"] for r in cap.records]
    assert kinds.count("epoch") == 1 and kinds.count("model_snapshot") == 1 and kinds.count("epoch_params") == 1
    assert cap.records[0] == {"kind": "epoch", "epoch_index": 267, "start_height": 4120752, "end_height": END_267}
    params = next(r for r in cap.records if r["kind"] == "epoch_params")
    # the pruned height was answered once (no retry), then the live values stood in with the height they came from
    assert [r for r in requests if r[0] == "/params"] == [("/params", None, str(END_267)), ("/params", None, None)]
    assert params["params_exact"] is False and params["params_height"] == LIVE
    assert params["validation_params"]["invalidation_h_threshold"] == {"exponent": 0, "value": "4"}  # the epoch's own
    assert params["devshard_escrow_params"]["vote_threshold_factor"] == 50
    people = {r["participant"]: r for r in cap.records if r["kind"] == "participant_epoch"}
    assert len(people) == 51
    assert people[KNOWN]["inference_count"] == 17344 and people[KNOWN]["confirmation_weight"] > 0
    # the reward rule's inputs: the root's (empty) scales, the raw totals of the sub-group that answered; a host
    # only in the failed Qwen sub-group has none (unknown, not 0)
    assert params["confirmation_weight_scales"] == {}
    assert people[KNOWN]["raw_confirmation_weight"] == 66115
    assert "raw_confirmation_weight" not in people["gonka12pcu9mcrpa4w4sjd9y3dsksnvu495ss6f9r4ra"]
    failed = {(f.what, f.model_id or f.participant) for f in cap.failures}
    assert ("model", QWEN) in failed
    assert sum(1 for what, _ in failed if what == "participant") == 50  # 404 for all but the captured one
    qwen = next(f for f in cap.failures if f.model_id == QWEN)
    assert qwen.source == f"snapshot:267:model:{QWEN}" and "HTTP 500" in qwen.error and qwen.transient
    assert "epoch_group_data/267?model_id=" in qwen.url
    assert "snapshot:267:params" in cap.succeeded and not cap.complete
    assert all(json.loads(dumps_record(r)) for r in cap.records)  # every record serialises as NDJSON


def test_an_ended_epoch_captures_each_participants_warm_keys_and_names_a_failed_read():
    """Hosts sign devshard messages with warm keys: the grants (grantees_by_message_type for MsgStartInference) are
    read once the epoch ends, as of its end height, as warm_key records with that height; where the node pruned it,
    today's grants stand in marked inexact (no height); a participant with no grants (the chain's empty list) has one
    record with an empty grantee; a failed read (a 5xx, or a 404 from a node without the route) is a warm_keys
    failure naming the participant, and no record."""
    other = "gonka12pcu9mcrpa4w4sjd9y3dsksnvu495ss6f9r4ra"
    pruned = "gonka14tqh62mangwzrma2lgg2dm375rcjzn2ydy8ttm"
    warm = "gonka1uyqp5z3dveamfw4pmw7p7rfvwdvgzewnqrzhsu"
    today = "gonka1qyqszqgpqyqszqgpqyqszqgpqyqszqgpzxxq27"
    base = _node([])
    grant_reads = []

    def handler(req: httpx.Request) -> httpx.Response:
        path = req.url.path.removeprefix(PREFIX)
        height = req.headers.get("x-cosmos-block-height")
        if path.startswith("/grantees_by_message_type/"):
            grant_reads.append((path.split("/")[2], height))
        if path == f"/grantees_by_message_type/{KNOWN}//inference.inference.MsgStartInference":
            return served(req, httpx.Response(200, json={"grantees": [
                {"address": warm if height == str(END_267) else today,
                 "pub_key": {"@type": "/cosmos.crypto.secp256k1.PubKey", "key": "A0Jt"}},
                {"pub_key": "no address: left out"}]}))
        if path == f"/grantees_by_message_type/{other}//inference.inference.MsgStartInference":
            return httpx.Response(500, json={"code": 13, "message": "internal", "details": []})
        if path == f"/grantees_by_message_type/{pruned}//inference.inference.MsgStartInference":
            if height is not None:
                return httpx.Response(500, json={"code": 2, "details": [], "message": (
                    f"failed to load state at height {height}; version does not exist (latest height: {LIVE})")})
            return served(req, httpx.Response(200, json={"grantees": [{"address": today}]}))
        if path == f"/grantees_by_message_type/{ROUTELESS}//inference.inference.MsgStartInference":
            # grpc-gateway's answer for a route it lacks (a node or proxy without it): not "no grants"
            return httpx.Response(404, json={"code": 5, "message": "Not Found", "details": []})
        if path.startswith("/grantees_by_message_type/"):
            return served(req, httpx.Response(200, json={"grantees": []}))  # the chain's answer for none granted
        return base(req)

    fetcher = Fetcher("http://node", policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                      client=httpx.Client(transport=httpx.MockTransport(handler)))
    cap = capture_epoch(ChainRest(fetcher), 267, ended=True)
    keys = {r["participant"]: r for r in cap.records if r["kind"] == "warm_key" and r["grantee"]}
    assert keys == {
        KNOWN: {"kind": "warm_key", "epoch_index": 267, "participant": KNOWN, "grantee": warm, "pub_key": "A0Jt",
                "read_height": END_267, "read_exact": True},
        pruned: {"kind": "warm_key", "epoch_index": 267, "participant": pruned, "grantee": today, "pub_key": None,
                 "read_height": None, "read_exact": False}}
    assert (pruned, str(END_267)) in grant_reads and (pruned, None) in grant_reads
    assert all(h == str(END_267) for p, h in grant_reads if p not in (pruned, other))
    none = [r for r in cap.records if r["kind"] == "warm_key" and not r["grantee"]]
    assert len(none) == 47 and {(r["read_height"], r["read_exact"]) for r in none} == {(END_267, True)}
    assert {KNOWN, pruned, other, ROUTELESS}.isdisjoint(r["participant"] for r in none)
    failed = sorted((f.participant, f.source) for f in cap.failures if f.what == "warm_keys")
    assert failed == sorted([(other, f"snapshot:267:warm_keys:{other}"),
                             (ROUTELESS, f"snapshot:267:warm_keys:{ROUTELESS}")])
    assert f"snapshot:267:warm_keys:{KNOWN}" in cap.succeeded
    running = capture_epoch(ChainRest(fetcher), 267, ended=False)
    assert not [r for r in running.records if r["kind"] == "warm_key"]  # today's grants are not a running epoch's

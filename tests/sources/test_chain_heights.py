"""Reads as of a past height (module params, warm-key grants): every node is asked before live values stand in,
and an answer counts as that height's state only when the node says it served that height (cosmos-sdk's
``Grpc-Metadata-X-Cosmos-Block-Height``). Nodes on httpx.MockTransport; no database is involved."""
from __future__ import annotations

import httpx
import pytest

from indexer.sources.gonka import Fetcher, FetchError, RetryPolicy
from indexer.sources.gonka.chain import PREFIX, ChainRest, HeightPruned
from indexer.sources.gonka.identity import grantees_at
from indexer.sources.gonka.snapshots import _grants

LIVE, END = 5660000, 4136542
HOST = "gonka12pcu9mcrpa4w4sjd9y3dsksnvu495ss6f9r4ra"
OLD_WARM, NEW_WARM = "gonka1oldwarmkey", "gonka1grantedaftertheepoch"


def pruned_answer(height: str) -> httpx.Response:
    return httpx.Response(500, json={"code": 2, "details": [], "message": (
        f"failed to load state at height {height}; version does not exist (latest height: {LIVE}): not found")})


def node(kind: str, asked: list):
    """``kind``: 'pruning' (keeps only the latest state), 'archive' (keeps every height and says so), 'ignoring'
    (answers today's state whatever the height asked, and says it served the latest), 'silent' (as ignoring,
    without the height header: a proxy that drops it)."""
    def handler(req: httpx.Request) -> httpx.Response:
        height = req.headers.get("x-cosmos-block-height")
        asked.append((req.url.host, height))
        if kind == "pruning" and height is not None:
            return pruned_answer(height)
        at_end = kind == "archive" and height == str(END)
        path = req.url.path.removeprefix(PREFIX)
        if path == "/params":
            body = {"params": {"validation_params": {"invalidation_h_threshold": "4" if at_end else "9"}}}
        else:
            body = {"grantees": [{"address": OLD_WARM if at_end else NEW_WARM}]}
        headers = {} if kind == "silent" else {
            "Grpc-Metadata-X-Cosmos-Block-Height": height if kind == "archive" and height else str(LIVE)}
        return httpx.Response(200, json=body, headers=headers)
    return handler


def chain(*kinds: str, failures: list | None = None) -> tuple[ChainRest, list]:
    asked: list = []
    handlers = {k: node(k, asked) for k in kinds}
    fetcher = Fetcher([f"http://{k}" for k in kinds], policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                      client=httpx.Client(transport=httpx.MockTransport(lambda r: handlers[r.url.host](r))),
                      on_failure=None if failures is None else (lambda url, msg, t: failures.append((url, msg))))
    return ChainRest(fetcher), asked


def test_a_pruned_height_at_the_first_node_is_asked_of_the_archive_node_next():
    rest, asked = chain("pruning", "archive")
    params, height = rest.params(END)
    assert height == END and params["params"]["validation_params"]["invalidation_h_threshold"] == "4"
    assert asked == [("pruning", str(END)), ("archive", str(END))]
    # the warm keys of the epoch, exact: the key granted after it is not among them
    assert _grants(rest, HOST, END) == ([{"address": OLD_WARM}], END, True, None)


def test_live_values_stand_in_only_when_no_node_keeps_the_height():
    rest, _ = chain("pruning")
    with pytest.raises(HeightPruned):
        rest.params(END)
    assert _grants(rest, HOST, END) == ([{"address": NEW_WARM}], None, False, None)


@pytest.mark.parametrize("kind", ["ignoring", "silent"])
def test_an_answer_not_said_to_be_of_the_height_asked_is_not_taken_as_it(kind):
    """A node (or proxy) that ignores x-cosmos-block-height serves today's grants: taken as the epoch's, a key granted
    after the epoch would authorise its signatures. Such an answer is recorded as the node's failure, and the
    grants are today's, marked inexact, unless another node serves the height."""
    failures: list = []
    rest, _ = chain(kind, failures=failures)
    with pytest.raises(HeightPruned):
        grantees_at(rest, HOST, END)
    assert _grants(rest, HOST, END) == ([{"address": NEW_WARM}], None, False, None)
    said = "was served at height 5660000" if kind == "ignoring" else "names no served height"
    assert failures and all(said in msg and url.startswith(f"http://{kind}") for url, msg in failures)

    rest, asked = chain(kind, "archive", failures=[])
    assert _grants(rest, HOST, END) == ([{"address": OLD_WARM}], END, True, None)
    assert rest.params(END)[0]["params"]["validation_params"]["invalidation_h_threshold"] == "4"
    assert rest.http.urls()[0] == "http://archive"  # the node that ignored the height is asked last from now on


def test_a_node_down_beside_a_pruning_one_leaves_live_values_and_a_node_down_alone_fails_the_read():
    """One node pruned the height, the other is down (a 5xx): no node serves the height now, so live values stand in
    (marked inexact; a later capture replaces them when the node that was down serves the height). With every node
    down, nothing was read: the read fails and is retried, never taken as pruned."""
    asked: list = []
    pruning = node("pruning", asked)

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.host == "down":
            return httpx.Response(503, text="upstream unavailable")
        return pruning(req)

    def rest(*hosts: str) -> ChainRest:
        return ChainRest(Fetcher([f"http://{h}" for h in hosts], policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                                 client=httpx.Client(transport=httpx.MockTransport(handler))))

    with pytest.raises(HeightPruned):
        rest("down", "pruning").params(END)
    *read, retry = _grants(rest("down", "pruning"), HOST, END)
    # the stand-in, and the node that was down named as a read still to make (a transient failure)
    assert read == [[{"address": NEW_WARM}], None, False]
    assert retry.transient and retry.url.startswith("http://down") and "503" in str(retry)
    with pytest.raises(FetchError) as err:
        rest("down").params(END)
    assert not isinstance(err.value, HeightPruned) and err.value.transient and "503" in str(err.value)


@pytest.mark.parametrize("body", [{}, {"grantees": None}, {"error": "upstream unavailable"}, {"grantees": "x"}, []])
@pytest.mark.parametrize("height", [END, None])
def test_an_answer_without_a_grantees_list_is_a_failed_read_naming_the_url(body, height):
    """The gateway always renders ``grantees`` (``[]`` for none granted): a 200 without a list there is no answer
    about the grants, never an exact "none granted"."""
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body, headers={"Grpc-Metadata-X-Cosmos-Block-Height": str(END)})

    rest = ChainRest(Fetcher(["http://proxy"], policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                             client=httpx.Client(transport=httpx.MockTransport(handler))))
    with pytest.raises(FetchError) as err:
        grantees_at(rest, HOST, height)
    url = f"http://proxy{PREFIX}/grantees_by_message_type/{HOST}/%2Finference.inference.MsgStartInference"
    assert err.value.url == url and url in str(err.value) and "no grantees list" in str(err.value)
    assert not isinstance(err.value, HeightPruned)


def test_an_empty_grantees_list_is_none_granted():
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"grantees": []}, headers={"Grpc-Metadata-X-Cosmos-Block-Height": str(END)})

    rest = ChainRest(Fetcher(["http://node"], policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                             client=httpx.Client(transport=httpx.MockTransport(handler))))
    assert grantees_at(rest, HOST, END) == ([], END)

"""The shared retry policy of the Gonka clients, on httpx.MockTransport (no sockets)."""
from __future__ import annotations

import httpx
import pytest

from indexer.sources.gonka import ChainRest, CometRpc, Fetcher, FetchError, RetryPolicy
from indexer.sources.gonka.http import retry_after_seconds


def _fetcher(handler, urls=("http://a",), **policy_kw):
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=policy_kw.pop("attempts", 4), sleep=sleeps.append, **policy_kw)
    failures: list[tuple] = []
    seen: list[tuple] = []
    f = Fetcher(list(urls), policy=policy, client=httpx.Client(transport=httpx.MockTransport(handler)),
                on_failure=lambda u, e, t: failures.append((u, e, t)),
                on_response=lambda u, s, b, h: seen.append((u, s)))
    return f, sleeps, failures, seen


def test_5xx_429_and_truncated_json_are_retried():
    answers = iter([httpx.Response(503, text="upstream"), httpx.Response(429, headers={"Retry-After": "7"}),
                    httpx.Response(200, content=b'{"epoch":"4'), httpx.Response(200, json={"epoch": "408"})])
    f, sleeps, failures, seen = _fetcher(lambda req: next(answers))
    assert ChainRest(f).current_epoch() == {"epoch": "408"}
    assert [s for _, s in seen] == [503, 429, 200, 200]
    assert sleeps[1] == 7.0  # Retry-After honoured
    assert len(failures) == 3 and all(t for _, _, t in failures)


def test_retry_after_is_capped():
    answers = iter([httpx.Response(429, headers={"Retry-After": "3600"}), httpx.Response(200, json={})])
    f, sleeps, _, _ = _fetcher(lambda req: next(answers), retry_after_max=5)
    f.get_json("/x")
    assert sleeps == [5]


def test_4xx_is_deterministic():
    calls = []

    def handler(req):
        calls.append(req)
        return httpx.Response(404, json={"code": 5, "message": "not found"})

    f, sleeps, failures, _ = _fetcher(handler, urls=("http://a",))
    with pytest.raises(FetchError) as err:
        f.get_json("/x")
    assert not err.value.transient and err.value.status == 404
    assert len(calls) == 1 and sleeps == []  # no retry
    assert len(failures) == 1 and failures[0][0] == "http://a/x"


@pytest.mark.parametrize("code", [403, 404, 302, 204])
def test_a_node_that_answers_wrongly_is_failed_over(code):
    """Any answer but 200 (or 5xx/429, retried) is a failure of that node: the next node is asked, the wrong
    answer is recorded against the first, and redirects are not followed."""
    calls = []

    def handler(req):
        calls.append(req.url.host)
        if req.url.host == "a":
            return httpx.Response(code, headers={"Location": "http://127.0.0.1:5432/"})
        return httpx.Response(200, json={"epoch": "9"})

    f, sleeps, failures, seen = _fetcher(handler, urls=("http://a", "http://b"))
    assert ChainRest(f).current_epoch() == {"epoch": "9"}
    assert calls == ["a", "b"] and sleeps == []
    assert [(u.split("/")[2], t) for u, _, t in failures] == [("a", False)]
    assert f.base_urls[0] == "http://b"  # asked first from now on


def test_an_unused_answer_is_archived_cut_short():
    answers = iter([httpx.Response(200, content=b" " * 100_000), httpx.Response(200, json={"epoch": "9"})])
    bodies = []
    f = Fetcher("http://a", policy=RetryPolicy(attempts=2, sleep=lambda s: None),
                client=httpx.Client(transport=httpx.MockTransport(lambda req: next(answers))),
                on_response=lambda u, s, b, h: bodies.append(len(b)))
    assert f.get_json("/x") == {"epoch": "9"}
    assert bodies == [4096, len(b'{"epoch":"9"}')]


def test_timeouts_exhaust_then_fail_over_to_the_next_chain_url():
    def handler(req):
        if req.url.host == "a":
            raise httpx.ReadTimeout("slow", request=req)
        return httpx.Response(200, json={"epoch": "9"})

    f, sleeps, failures, _ = _fetcher(handler, urls=("http://a", "http://b"), attempts=3)
    assert ChainRest(f).current_epoch() == {"epoch": "9"}
    assert len(failures) == 3 and len(sleeps) == 2
    assert f.base_urls[0] == "http://b"  # the answering URL is preferred next time


def test_all_urls_down_raises_transient():
    f, _, _, _ = _fetcher(lambda req: httpx.Response(502, text="bad gateway"), urls=("http://a", "http://b"),
                          attempts=2)
    with pytest.raises(FetchError) as err:
        f.get_json("/x")
    assert err.value.transient


class _Edges:
    """An rng that answers one end of every range it is asked for."""

    def __init__(self, top: bool) -> None:
        self.top = top

    def uniform(self, a, b):
        return b if self.top else a


def test_backoff_is_exponential_with_jitter():
    top = RetryPolicy(backoff_base=1, backoff_max=8, rng=_Edges(True))
    assert [top.backoff(attempt) for attempt in range(6)] == [1, 2, 4, 8, 8, 8]  # doubling, capped
    bottom = RetryPolicy(backoff_base=1, backoff_max=8, rng=_Edges(False))
    assert [bottom.backoff(attempt) for attempt in range(6)] == [0] * 6  # full jitter reaches down to 0


def test_retry_after_forms():
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_tx_search_pages_until_total():
    def handler(req):
        page = int(req.url.params["page"])
        per = int(req.url.params["per_page"])
        assert req.url.params["query"] == "\"devshard_escrow_created.epoch_index='408'\""
        txs = [{"hash": f"H{i}", "height": str(10 + i), "tx_result": {"code": 0, "events": [
            {"type": "devshard_escrow_created", "attributes": [{"key": "escrow_id", "value": str(i)}]}]}}
            for i in range((page - 1) * per, min(page * per, 250))]
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": -1, "result": {"txs": txs, "total_count": "250"}})

    f, _, _, seen = _fetcher(handler)
    events = CometRpc(f).escrows_created(408)
    assert [e.attributes["escrow_id"] for e in events] == [str(i) for i in range(250)]
    assert len(seen) == 3


def test_tx_search_pages_by_the_size_a_node_serves_when_it_caps_per_page():
    """A node (or a proxy before it) that serves 30 txs a page when asked for 100 (CometBFT's default page size,
    rpc/core/env.go validatePerPage) is read to total_count on its own pages, not stopped after total/100 of them."""
    def handler(req):
        page = int(req.url.params["page"])
        txs = [{"hash": f"H{i}", "height": str(10 + i), "tx_result": {"code": 0, "events": [
            {"type": "devshard_escrow_created", "attributes": [{"key": "escrow_id", "value": str(i)}]}]}}
            for i in range((page - 1) * 30, min(page * 30, 75))]
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": -1, "result": {"txs": txs, "total_count": "75"}})

    f, _, _, seen = _fetcher(handler)
    events = CometRpc(f).escrows_created(408)
    assert [e.attributes["escrow_id"] for e in events] == [str(i) for i in range(75)]
    assert len(seen) == 3

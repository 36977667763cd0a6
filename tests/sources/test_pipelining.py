"""The poller's fetch concurrency. Payload requests pipelined (HTTP/1.1): FastClient.get_many writes a batch of
GETs back to back on one connection and reads the answers in order; Fetcher.get_json_many gives every answer the
single request's path (retries, failover, hooks); the poller asks a group's members in turn, each only for what
failed at the one before. And the decode pool, started before the first escrow needs it.

The servers are real sockets on loopback. The first one answers only once every request of the batch has arrived,
so a client that waits for each answer before sending the next request times out there."""
from __future__ import annotations

import base64
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from indexer.sources.gonka.fastclient import FastClient
from indexer.sources.gonka.http import Fetcher, FetchError, RetryPolicy
from tests.support.listeners import close_listener


class BatchOnlyServer:
    """Reads until ``expect`` whole requests have arrived on the connection, then answers each with its target."""

    def __init__(self, expect: int, answer=lambda target: target) -> None:
        self.expect, self.answer = expect, answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while data.count(b"\r\n\r\n") < self.expect:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            for head in data.split(b"\r\n\r\n")[:self.expect]:
                body = self.answer(head.split(b"\r\n", 1)[0].split()[1])
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def close(self) -> None:
        close_listener(self.sock)


def test_a_run_of_diff_pages_is_asked_for_at_once_and_read_to_the_end_of_the_log() -> None:
    from indexer.sources.gonka import DevshardHost, HostGroup

    def page(target: bytes) -> bytes:  # the log ends at nonce 150
        q = {k: int(v[0]) for k, v in parse_qs(urlsplit(target.decode()).query).items()}
        return json.dumps([{"diff": {"nonce": n}} for n in range(q["from"], min(q["to"], 150) + 1)]).encode()

    server = BatchOnlyServer(expect=3, answer=page)
    try:
        host = DevshardHost("a", Fetcher(f"http://127.0.0.1:{server.port}", client=FastClient(timeout=5)))
        group = HostGroup("e1", "v5", ["a"], {"a": host}.get, full_decode=False)
        diffs, root = group._read(host, 1, 192)  # pages 1..64, 65..128, 129..192
        assert [d["nonce"] for d in diffs] == list(range(1, 151)) and root == b""  # the last diff sends no root
        assert host.http.requests == 3
    finally:
        server.close()


def test_get_many_sends_the_batch_before_reading_any_answer() -> None:
    server = BatchOnlyServer(expect=5)
    try:
        client = FastClient(timeout=5)
        urls = [(f"http://127.0.0.1:{server.port}/payloads", {"inference_id": str(i)}, {"X-Epoch-Id": "7"})
                for i in range(5)]
        answers = client.get_many(urls)
        assert [a.status_code for a in answers] == [200] * 5
        assert [a.content for a in answers] == [b"/payloads?inference_id=%d" % i for i in range(5)]
        assert answers[3].url == f"http://127.0.0.1:{server.port}/payloads?inference_id=3"
        client.close()
    finally:
        server.close()


class OneAtATimeServer:
    """A server (or proxy) that does not take pipelines: each read answers the first request in what it got and
    drops the rest, then waits for more."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    @staticmethod
    def _connection(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                target = data.split(b"\r\n", 1)[0].split()[1]
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(target), target))

    def close(self) -> None:
        close_listener(self.sock)


def test_an_origin_that_drops_pipelined_requests_gets_one_at_a_time_after_the_first_timeout() -> None:
    server = OneAtATimeServer()
    try:
        client = FastClient(timeout=1)
        urls = [(f"http://127.0.0.1:{server.port}/p", {"inference_id": str(i)}, None) for i in range(3)]
        first = client.get_many(urls)
        assert first[0].content == b"/p?inference_id=0"
        assert isinstance(first[1], httpx.ReadTimeout) and first[2] is None
        again = client.get_many(urls)  # one request at a time now: every one answered
        assert [a.content for a in again] == [b"/p?inference_id=%d" % i for i in range(3)]
        client.close()
    finally:
        server.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    flaky_seen: set = set()

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/close-said":  # the last answer on this connection, and it says so
            self._answer(200, b'"closing"', {"Connection": "close"})
            self.close_connection = True
        elif url.path == "/close-unsaid":  # answers, then closes without saying so
            self._answer(200, b'"gone"')
            self.close_connection = True
        elif url.path == "/p":
            iid = q.get("inference_id", "")
            if iid == "404":
                self._answer(404, b"payload not found")
            elif iid.startswith("flaky") and (iid, self.headers.get("X-Run")) not in Handler.flaky_seen:
                Handler.flaky_seen.add((iid, self.headers.get("X-Run")))
                self._answer(503, b"upstream busy")
            else:
                self._answer(200, json.dumps({"inference_id": iid}).encode())
        else:
            self._answer(404, b"no route")

    def _answer(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def base():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_said_close_ends_the_batch_and_the_rest_are_left_to_send_again(base: str) -> None:
    client = FastClient(timeout=5)
    answers = client.get_many([(f"{base}/p", {"inference_id": "1"}, None), (f"{base}/close-said", None, None),
                               (f"{base}/p", {"inference_id": "3"}, None)])
    assert [a.content for a in answers[:2]] == [b'{"inference_id": "1"}', b'"closing"']
    assert answers[2] is None
    again = client.get_many([(f"{base}/p", {"inference_id": "3"}, None)])  # a new connection
    assert again[0].status_code == 200
    client.close()


def test_an_unsaid_close_after_an_answer_leaves_the_rest_unanswered_not_failed(base: str) -> None:
    client = FastClient(timeout=5)
    answers = client.get_many([(f"{base}/p", {"inference_id": "1"}, None), (f"{base}/close-unsaid", None, None),
                               (f"{base}/p", {"inference_id": "3"}, None), (f"{base}/p", {"inference_id": "4"}, None)])
    assert [a.status_code for a in answers[:2]] == [200, 200]
    assert answers[2:] == [None, None]
    client.close()


def test_a_refused_connection_fails_the_first_request_only() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    client = FastClient(timeout=2)
    answers = client.get_many([(f"http://127.0.0.1:{port}/p", None, None)] * 3)
    assert isinstance(answers[0], httpx.ConnectError)
    assert answers[1:] == [None, None]
    with pytest.raises(httpx.ConnectError):
        client.get(f"http://127.0.0.1:{port}/p")


def test_one_batch_has_one_origin(base: str) -> None:
    with pytest.raises(ValueError, match="one origin"):
        FastClient().get_many([(f"{base}/p", None, None), ("http://127.0.0.2:1/p", None, None)])


@pytest.mark.parametrize("client_kind", ["fast", "httpx"])
def test_get_json_many_gives_each_answer_the_single_request_path(base: str, client_kind: str) -> None:
    """200s, a deterministic 404, a 503 retried to a 200, and a close in the middle: the same results whether the
    client pipelines (FastClient) or not (httpx, one at a time); every answer reaches the hook once."""
    seen: list[tuple[str, int]] = []
    failures: list[str] = []
    client = FastClient(timeout=5) if client_kind == "fast" else httpx.Client(timeout=5)
    fetcher = Fetcher(base, policy=RetryPolicy(attempts=3, sleep=lambda s: None), client=client,
                      on_response=lambda url, status, body, headers: seen.append((url, status)),
                      on_failure=lambda url, error, transient: failures.append(error))
    ids = ["1", "404", "flaky-a", "2"]
    out = fetcher.get_json_many("/p", [{"inference_id": i} for i in ids], [{"X-Run": client_kind}] * len(ids))
    assert out[0] == {"inference_id": "1"} and out[3] == {"inference_id": "2"}
    assert out[2] == {"inference_id": "flaky-a"}  # the 503 was retried on its own
    assert isinstance(out[1], FetchError) and out[1].status == 404 and not out[1].transient
    statuses = sorted(status for _, status in seen)
    assert statuses == [200, 200, 200, 404, 503]
    assert fetcher.requests == 5
    assert sorted(f.split(":")[0] for f in failures) == ["HTTP 404", "HTTP 503"]
    client.close()


def test_get_json_many_sends_again_what_a_closing_server_left(base: str) -> None:
    fetcher = Fetcher(base, policy=RetryPolicy(attempts=2, sleep=lambda s: None), client=FastClient(timeout=5))
    out = fetcher.get_json_many("/close-said", [None, None, None], [None, None, None])
    assert out == ["closing"] * 3  # each answered: the second and third on connections of their own
    assert fetcher.requests == 3


class StubHost:
    """A member's answers to payload batches (what DevshardHost.payloads returns), and the batches it was asked."""

    operator = None  # no operator mode: requests unsigned

    def __init__(self, answers: dict) -> None:
        self.answers, self.asked = answers, []

    def payloads(self, version, escrow_id, ids, **kw):
        self.asked.append(list(ids))
        return [self.answers.get(i) for i in ids]  # no answer: no payload stored


def test_each_member_is_asked_only_for_what_the_members_before_it_did_not_serve() -> None:
    from types import SimpleNamespace

    from indexer.poller.fetch import EscrowFetcher
    from indexer.sources.gonka import HostGroup
    from indexer.sources.gonka.host import PayloadShapeError
    from indexer.wire.payloads import response_hash_of

    shape = PayloadShapeError("http://a/p?inference_id=4", "payload response: expected a JSON object",
                              status=200, transient=False)
    hosts = {
        "a": StubHost({1: "p1", 2: FetchError("http://a/p", "HTTP 503", status=503), 3: None,
                       4: shape, 5: FetchError("http://a/p", "HTTP 404", status=404, transient=False)}),
        "b": StubHost({2: "p2"}),
        "c": StubHost({5: "p5"}),
    }
    reported: list[tuple] = []
    fetcher = EscrowFetcher(SimpleNamespace(host=hosts.get), lambda *a: reported.append(a), validator="v",
                            fetch_payloads=True, payload_pool=None, decoders=None)
    group = HostGroup("e1", "v5", ["a", "b", "c"], hosts.get)
    wanted = {i: response_hash_of(f"p{i}") for i in (1, 2, 3, 4, 5)}
    asked = fetcher._payloads(group, "v5", "e1", wanted, 7)
    assert asked.found == {1: "p1", 2: "p2", 5: "p5"} and asked.refused == set()
    assert hosts["a"].asked == [[1, 2, 3, 4, 5]] and hosts["b"].asked == [[2, 3, 4, 5]]
    assert hosts["c"].asked == [[3, 4, 5]]
    assert [i for i in wanted if not asked.settled(i)] == [3, 4]
    assert reported == [("host:a", "http://a/p?inference_id=4", str(shape), False)]


def test_the_decode_pool_starts_its_workers_before_the_first_escrow_needs_them() -> None:
    """The forkserver's imports (~0.3 s) happen while the cycle reads the chain, not on the first fetch thread."""
    from indexer.poller.decode import decode_pool

    pool = decode_pool(2)
    try:
        pool.started.join(timeout=60)
        assert not pool.started.is_alive()
        assert len(pool.processes) == 2  # no task of ours was submitted
        assert all(p.is_alive() for p in pool.processes.values())
    finally:
        pool.shutdown(wait=True)
    assert decode_pool(0) is None


class _Pages:
    """A member's diff log as DevshardHost.diff_pages gives it: entries 1..n, the last one's root as given."""

    def __init__(self, n: int, last_root: str) -> None:
        self.n, self.last_root = n, last_root

    def diff_pages(self, version, escrow_id, ranges):
        good = base64.b64encode(b"\x01" * 32).decode()
        return [[{"diff": {"nonce": k, "post_state_root": self.last_root if k == self.n else good}}
                 for k in range(first, min(last, self.n) + 1)] for first, last in ranges]


def test_a_run_whose_last_root_does_not_decode_is_read_from_another_member() -> None:
    """Headers leave the roots in the entry (state_root reads the one a run is compared by): a root that is not
    base64 still fails its member, as the source of a run or as a witness, and the run comes from another."""
    from indexer.sources.gonka import HostGroup

    root = base64.b64encode(b"\x02" * 32).decode()
    skipped = []
    members = {"bad": _Pages(3, "not base64!"), "good": _Pages(3, root), "other": _Pages(3, root)}
    group = HostGroup("e1", "v5", ["bad", "good", "other"], members.get, lambda a, why, t: skipped.append((a, why)),
                      full_decode=False)
    assert [d["nonce"] for d in group.page(1, 3)] == [1, 2, 3] and group.primary == "good"
    assert skipped == [("bad", "diff 3 post_state_root: invalid base64")]
    skipped.clear()
    witness_bad = HostGroup("e1", "v5", ["good", "bad"], members.get, lambda a, why, t: skipped.append((a, why)),
                            full_decode=False)
    assert [d["nonce"] for d in witness_bad.page(1, 3)] == [1, 2, 3]  # no witness could answer: the only log
    assert skipped == [("bad", "diff 3 post_state_root: invalid base64")]

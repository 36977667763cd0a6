"""FastClient (the poller's keep-alive GET client) against real servers on loopback: TLS with a real certificate
chain, chunked bodies (with extensions and trailers), unframed bodies, keep-alive reuse and a server that closes an
idle connection, truncation, and an untrusted certificate. Every answer is compared with httpx's for the same URL."""
from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import trustme

from indexer.sources.gonka import fastclient
from indexer.sources.gonka.fastclient import DeadlineExceeded, FastClient, PermanentTransportError, ResponseTooLarge
from tests.support.hostile import Hostile, streamed, trickle

OVERSIZE = ("/huge-length", "/endless-chunked", "/endless-unframed", "/endless-headers")
LIMIT, SENT = 1 << 20, 8 << 20  # the client's limit in these tests, and what the server sends at most
BODY = b'{"escrow":{"slots":["gonka1a","gonka1b"]},"found":true}' * 50


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: set = set()

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        Handler.connections.add(id(self.connection))
        path = self.path.split("?")[0]
        if path == "/length":
            self._send_head(200, {"Content-Length": str(len(BODY)), "X-Cosmos-Block-Height": "2450123"})
            self.wfile.write(BODY)
        elif path == "/chunked":
            self._send_head(200, {"Transfer-Encoding": "chunked"})
            for i in range(0, len(BODY), 333):
                part = BODY[i:i + 333]
                self.wfile.write(f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")
        elif path == "/truncated-chunked":
            self._send_head(200, {"Transfer-Encoding": "chunked", "Connection": "close"})
            self.wfile.write(b"400\r\n" + BODY[:100])
            self.close_connection = True
        elif path == "/unframed":
            self._send_head(200, {"Connection": "close"})
            self.wfile.write(BODY)
            self.close_connection = True
        elif path == "/echo-query":
            body = self.path.encode()
            self._send_head(200, {"Content-Length": str(len(body))})
            self.wfile.write(body)
        elif path in OVERSIZE:
            self._oversize(path)
        elif path == "/close-after":
            # answers, then closes the kept-alive connection without saying so (as idle-timeout servers do)
            self._send_head(200, {"Content-Length": "2"})
            self.wfile.write(b"ok")
            self.close_connection = True
        else:
            self._send_head(404, {"Content-Length": "0"})

    def _oversize(self, path: str) -> None:
        """An answer past the client's limit (the tests set it to LIMIT), in each framing; it stops at SENT bytes,
        so a client without a limit gets it whole instead of hanging."""
        try:
            self._send_oversize(path)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client refused the answer and hung up: what it should do
        self.close_connection = True

    def _send_oversize(self, path: str) -> None:
        w = self.wfile
        w.write(b"HTTP/1.1 200 OK\r\n")
        if path == "/endless-headers":
            for i in range(SENT // 16):
                w.write(b"X-H%08d: y\r\n" % i)
            w.write(b"Content-Length: 0\r\n\r\n")
        elif path == "/huge-length":  # announced, never sent: refused without reading (nor waiting for) it
            w.write(b"Content-Length: %d\r\n\r\n" % (1 << 40))
            w.flush()
            self.rfile.read(1)  # until the client hangs up
        elif path == "/endless-chunked":
            w.write(b"Transfer-Encoding: chunked\r\n\r\n")
            part = b"x" * 65536
            for _ in range(SENT // len(part)):
                w.write(b"%x\r\n" % len(part) + part + b"\r\n")
            w.write(b"0\r\n\r\n")
        else:  # /endless-unframed
            w.write(b"Connection: close\r\n\r\n" + b"x" * SENT)

    def _send_head(self, status: int, headers: dict) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


def _serve(ssl_ctx: ssl.SSLContext | None):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if ssl_ctx is not None:
        server.socket = ssl_ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def https_base(ca):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(ctx)
    server = _serve(ctx)
    yield f"https://localhost:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def http_base():
    server = _serve(None)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _trusting(ca) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@pytest.mark.parametrize("path", ["/length", "/chunked", "/unframed", "/echo-query"])
def test_tls_answers_equal_httpx(ca, https_base, path):
    fast = FastClient(timeout=5, ssl_context=_trusting(ca))
    with httpx.Client(verify=_trusting(ca), timeout=5) as reference:
        want = reference.get(https_base + path, params={"model_id": "Qwen/Qwen3 235B", "a": "1&2"})
    got = fast.get(https_base + path, params={"model_id": "Qwen/Qwen3 235B", "a": "1&2"})
    fast.close()
    assert got.status_code == want.status_code == 200
    assert got.content == want.content
    if path in ("/length", "/chunked", "/unframed"):
        assert got.content == BODY


def test_tls_block_height_header_is_read_case_insensitively(ca, https_base):
    fast = FastClient(timeout=5, ssl_context=_trusting(ca))
    got = fast.get(https_base + "/length")
    fast.close()
    assert got.headers.get("x-cosmos-block-height") == got.headers.get("X-Cosmos-Block-Height") == "2450123"


def test_chunked_over_plain_http_with_keep_alive_reuse(http_base):
    Handler.connections.clear()
    fast = FastClient(timeout=5)
    bodies = [fast.get(http_base + "/chunked").content for _ in range(5)]
    fast.close()
    assert bodies == [BODY] * 5
    assert len(Handler.connections) == 1  # one connection served all five (keep-alive, trailers consumed)


def test_a_connection_the_server_closed_is_replaced_transparently(http_base):
    fast = FastClient(timeout=5)
    assert [fast.get(http_base + "/close-after").content for _ in range(3)] == [b"ok"] * 3
    fast.close()


def test_truncated_chunked_body_is_a_transport_error(http_base, ca, https_base):
    for base, ctx in ((http_base, None), (https_base, _trusting(ca))):
        fast = FastClient(timeout=5, ssl_context=ctx)
        with pytest.raises(httpx.TransportError):
            fast.get(base + "/truncated-chunked")
        fast.close()


def test_untrusted_certificate_is_refused(https_base):
    fast = FastClient(timeout=5)  # the system trust store does not know the test CA
    # permanent: the same certificate answers every retry
    with pytest.raises(PermanentTransportError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        fast.get(https_base + "/length")
    fast.close()


def test_wrong_hostname_is_refused(ca, https_base):
    # the certificate names only "localhost": the same server reached as 127.0.0.1 must fail verification
    port = https_base.rsplit(":", 1)[1]
    fast = FastClient(timeout=5, ssl_context=_trusting(ca))
    with pytest.raises(PermanentTransportError,
                       match="IP address mismatch|doesn't match|CERTIFICATE_VERIFY_FAILED"):
        fast.get(f"https://127.0.0.1:{port}/length")
    fast.close()


@pytest.mark.parametrize("path", OVERSIZE)
def test_an_answer_past_the_size_limit_is_refused_and_the_client_goes_on(http_base, path, monkeypatch):
    """A peer that announces or streams more than MAX_RESPONSE_BYTES (a broken or hostile host) costs a transport
    error after at most that much is read, never the poller's memory; the next request gets a fresh connection."""
    monkeypatch.setattr(fastclient, "MAX_RESPONSE_BYTES", LIMIT)
    fast = FastClient(timeout=10)
    with pytest.raises(ResponseTooLarge, match="response refused"):
        fast.get(http_base + path)
    assert fast.get(http_base + "/length").content == BODY
    fast.close()


def test_an_answer_at_the_size_limit_is_read(http_base, monkeypatch):
    monkeypatch.setattr(fastclient, "MAX_RESPONSE_BYTES", len(BODY))
    fast = FastClient(timeout=10)
    assert [fast.get(http_base + p).content for p in ("/length", "/chunked", "/unframed")] == [BODY] * 3
    fast.close()


MiB = 1 << 20


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\n",
                                  b"HTTP/1.1 200 OK\r\nContent-Length: 12, 13\r\n\r\n"],
                         ids=["negative-length", "negative-chunk", "two-lengths"])
def test_a_malformed_length_is_a_protocol_error_not_a_read_to_the_end(head):
    """A negative Content-Length or chunk size once passed the size check and was read until the peer closed
    (1 GB of RSS for a 100 MB body): now the answer is refused at its head, having read a few buffers at most."""
    import tracemalloc

    with Hostile() as peer:
        peer.on("/", streamed(head, b"x" * 65536, 100 * MiB))
        fast = FastClient(timeout=5)
        tracemalloc.start()
        try:
            with pytest.raises(httpx.RemoteProtocolError, match="malformed answer"):
                fast.get(peer.url + "/x")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            fast.close()
    assert peak < 4 * MiB


def test_a_peer_trickling_its_headers_is_cut_at_the_deadline():
    """One header byte every 0.2 s never trips the 1 s read timeout; the answer's total deadline (1.5 s) ends it."""
    import time

    with Hostile() as peer:
        peer.on("/", trickle(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000, every=0.2))
        fast = FastClient(timeout=1, deadline=1.5)
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="deadline"):
            fast.get(peer.url + "/x")
        elapsed = time.monotonic() - t0
        fast.close()
    assert 1.5 <= elapsed < 3


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x"])
def test_a_scheme_that_is_not_http_is_permanent(url):
    fast = FastClient(timeout=1)
    with pytest.raises(PermanentTransportError, match="unsupported scheme"):
        fast.get(url)
    fast.close()


@pytest.mark.parametrize("where", ["tls", "scheme"])
def test_the_fetcher_does_not_retry_a_permanent_transport_failure(https_base, where):
    """An untrusted certificate or a non-HTTP scheme fails the same way on every try: one attempt, recorded as a
    permanent failure (it was retried six times as transient)."""
    from indexer.sources.gonka import Fetcher, FetchError, RetryPolicy

    failures: list[tuple] = []
    base = https_base if where == "tls" else "file:///etc"
    fetcher = Fetcher(base, policy=RetryPolicy(attempts=6, sleep=lambda s: None), client=FastClient(timeout=5),
                      on_failure=lambda u, e, t: failures.append((u, e, t)))
    with pytest.raises(FetchError) as err:
        fetcher.get_json("/length")
    fetcher.client.close()
    assert not err.value.transient and fetcher.requests == 1
    assert len(failures) == 1 and "PermanentTransportError" in failures[0][1] and failures[0][2] is False

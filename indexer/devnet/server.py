"""HTTP server for the devnet (stdlib ``ThreadingHTTPServer``, loopback, OS-chosen port).

Fault injection sits in front of routing so every surface can misbehave like a public node:
5xx answers, 429 with ``Retry-After``, slow answers (read timeouts on the client side), and JSON
bodies cut short (a valid HTTP response whose body does not parse). The lying host is data, not
chance: it always serves its diverging diff log. Faults draw from their own seeded RNG, one fixed
sequence of draws per request, so a sequential client sees the same faults on every run.

Outages are state, not chance, so a test decides exactly when they start and end (between poll cycles):
``Faults.down_hosts`` (participant addresses whose host closes every connection without an answer, like a
crashed host behind a TCP proxy), ``Faults.slow_hosts`` (every answer of those hosts waits ``slow_seconds``) and
``Faults.down_nodes`` (indexes of chain nodes that close every connection). Several chain nodes share the one
listener under ``/nodes/<k>/chain-api`` and ``/nodes/<k>/chain-rpc`` (:meth:`DevnetServer.chain_rest_urls`), so a
client configured with several chain URLs can fail over from a node that is down to one that answers.
"""

from __future__ import annotations

import random
import re
import socket
import socketserver
import threading
import time
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from indexer.devnet import hostviews
from indexer.devnet.routes import App, AppOptions, Response
from indexer.devnet.scenario import Scenario
from indexer.devnet.world import Devnet


@dataclass(frozen=True)
class FaultConfig:
    seed: int = 0
    p_5xx: float = 0.0
    p_429: float = 0.0
    retry_after: int = 1  # seconds, sent in Retry-After
    p_delay: float = 0.0
    delay_seconds: float = 1.0
    p_truncate: float = 0.0
    lying_host: str | None = None  # participant address whose host serves a diverging diff log
    lying_kind: str = "altered"  # "altered": txs changed under the user's signatures (fails the signature check);
                                 # "fork": a history the user signed too (only the settlement tells it apart)
    paths: tuple[str, ...] = ()  # only paths with one of these prefixes get faults; () = all but /devnet/
    serve_upto: int | None = None  # hosts serve no diff beyond this nonce (a stuck log; shard detail still
                                   # reports the full nonce): what the poller's progress watchdog must notice
    hosts_down: tuple[str, ...] = ()  # participant addresses whose hosts are down from the start
    slow_hosts: tuple[str, ...] = ()  # participant addresses whose hosts answer every request late
    slow_seconds: float = 0.05
    nodes_down: tuple[int, ...] = ()  # chain nodes (/nodes/<k>/…) down from the start


_NODE_PATH = re.compile(r"^/nodes/(\d+)(/chain-(?:api|rpc)/.*)$")
_HOST_PATH = re.compile(r"^/hosts/([^/]+)/")


@dataclass(frozen=True)
class FaultDecision:
    delay: float = 0.0
    status: int = 0  # 0 = no injected error
    truncate: float = 0.0  # fraction of the body kept; 0 = whole body


class Faults:
    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed)
        self._lock = threading.Lock()
        self.injected: dict[str, int] = {"delay": 0, "429": 0, "5xx": 0, "truncate": 0, "down": 0, "slow": 0}
        # outages: plain sets, changed by the test between cycles (reads under the GIL see one or the other)
        self.down_hosts: set[str] = set(config.hosts_down)
        self.slow_hosts: set[str] = set(config.slow_hosts)
        self.down_nodes: set[int] = set(config.nodes_down)
        self.host_addresses: dict[str, str] = {}  # host name in the URL → participant address (set by the server)
        # no random fault configured: no draws at all (they could change nothing), so no lock on every request
        self._random = any((config.p_5xx, config.p_429, config.p_delay, config.p_truncate))

    def count(self, key: str) -> None:
        with self._lock:
            self.injected[key] += 1

    def outage(self, path: str, node: int | None) -> tuple[bool, float]:
        """(the connection is dropped unanswered, seconds to wait first) for a request to ``path`` on chain node
        ``node`` (None: not a node path). Outages apply to /devnet/ control routes never."""
        if not (self.down_hosts or self.slow_hosts or self.down_nodes):
            return False, 0.0  # no outage: no path matching on every request
        if node is not None:
            down, slow = node in self.down_nodes, False
        else:
            m = _HOST_PATH.match(path)
            address = self.host_addresses.get(m.group(1)) if m else None
            down, slow = address in self.down_hosts, address in self.slow_hosts
        if down or slow:
            with self._lock:
                self.injected["down" if down else "slow"] += 1
        return down, (self.config.slow_seconds if slow and not down else 0.0)

    def applies(self, path: str) -> bool:
        if path.startswith("/devnet/"):
            return False
        return not self.config.paths or path.startswith(self.config.paths)

    def draw(self, path: str) -> FaultDecision:
        if not self._random or not self.applies(path):
            return _NO_FAULT
        cfg = self.config
        with self._lock:  # always five draws, so one request's faults never shift the next one's
            r_delay, r_429, r_5xx, r_trunc, r_pick = (self._rng.random() for _ in range(5))
            delay = cfg.delay_seconds if r_delay < cfg.p_delay else 0.0
            status = 429 if r_429 < cfg.p_429 else ((500, 502, 503)[int(r_pick * 3)] if r_5xx < cfg.p_5xx else 0)
            truncate = 0.2 + 0.6 * r_pick if r_trunc < cfg.p_truncate and not status else 0.0
            for key, hit in (("delay", delay), ("429", status == 429), ("5xx", status >= 500)):
                self.injected[key] += bool(hit)  # truncations are counted where one is applied (a 200 answer)
        return FaultDecision(delay, status, truncate)


_NO_FAULT = FaultDecision()


def _fault_response(status: int, retry_after: int) -> Response:
    if status == 429:
        resp = Response.text("rate limit exceeded", 429)
        resp.headers["Retry-After"] = str(retry_after)
        return resp
    return Response.text({500: "internal server error", 502: "bad gateway",
                          503: "upstream connect error or disconnect/reset before headers"}[status], status)


class _Handler(socketserver.BaseRequestHandler):
    """One keep-alive connection, read and answered here rather than by ``BaseHTTPRequestHandler`` (email-style
    header parsing, a log line formatted per request, one write per answer: ≈ 250 µs of CPU a request, and the devnet
    shares the benchmark machine's cores with the poller it serves, which a real host on its own machine does not).
    Requests are cut out of what each ``recv`` brought, so a pipelined batch (the poller's payload requests) is
    parsed from one or two reads, and their answers leave in one send once no whole request is left to answer, as a
    Go server's buffered writer flushes when its reader would block. An injected delay or outage sends the answers
    before it first, so every earlier request is answered on time."""
    server: "_Server"

    def setup(self) -> None:
        # a response that outgrows the buffer is still two writes: no delayed-ACK stall
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self.out: list[bytes] = []

    def handle(self) -> None:
        sock, buf, pos = self.request, bytearray(), 0
        while True:
            request = _parse_request(buf, pos)
            if request is None:  # no whole request left: answer what was asked, then wait for more
                if not self._flush():
                    return
                try:
                    data = sock.recv(_RECV_BYTES)
                except OSError:  # reset by the client, or the server is stopping
                    return
                if not data:  # the client closed the connection
                    return
                del buf[:pos]  # what was answered; a request that came in pieces grows in place
                buf += data
                pos = 0
                continue
            if isinstance(request, int):  # a request that cannot be read: its status, and the connection ends
                self.out.append(_answer(Response.text("bad request", request), b"", close=True))
                self._flush()
                return
            method, target, headers, keep_alive, pos = request
            try:
                served = self._serve(method, target, headers, close=not keep_alive)
            except BaseException:
                self._flush()  # a route that raised loses its own answer only, not those queued before it
                raise
            if not served or not keep_alive:
                self._flush()
                return

    def _flush(self) -> bool:
        """Send the answers not yet sent; False if the client is gone (its read timeout fired during an injected
        delay, say)."""
        if not self.out:
            return True
        data, self.out = b"".join(self.out), []
        try:
            self.request.sendall(data)
        except OSError:
            return False
        return True

    def _serve(self, method: str, target: str, headers: dict[str, str], close: bool) -> bool:
        """Answer one request (queued in ``self.out``); False when the connection must end unanswered (an outage)."""
        head_only = method == "HEAD"  # answered as GET without the body (Go's net/http does the same)
        if head_only:
            method = "GET"
        url = urlsplit(target)
        path, node = url.path, None
        m = _NODE_PATH.match(path)
        if m:
            node, path = int(m.group(1)), m.group(2)
        faults = self.server.faults
        down, wait = faults.outage(path, node)
        if down:
            return False  # no status line: the client sees the connection closed unanswered
        decision = faults.draw(path)
        if wait or decision.delay:
            if not self._flush():
                return False
            time.sleep(wait + decision.delay)
        if decision.status:
            resp = _fault_response(decision.status, faults.config.retry_after)
        else:
            resp = self.server.app.handle(method, path, parse_qs(url.query, keep_blank_values=True), headers)
        body = resp.body
        if decision.truncate and resp.status == 200 and len(body) > 1:
            body = body[: max(1, int(len(body) * decision.truncate))]
            faults.count("truncate")
        self.out.append(_answer(resp, body, close, head_only))
        return True


def _answer(resp: Response, body: bytes, close: bool, head_only: bool = False) -> bytes:
    """Status line, headers and body (none for HEAD)."""
    head = [f"HTTP/1.1 {resp.status} {_REASONS.get(resp.status, '')}", f"Date: {_http_date()}"]
    head.extend(f"{key}: {value}" for key, value in resp.headers.items())
    head.append(f"Content-Length: {len(body)}")
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else body)


_RECV_BYTES = 65536
_MAX_LINE = 65536
_MAX_HEADERS = 100


def _parse_request(buf: bytearray, pos: int) -> tuple[str, str, dict[str, str], bool, int] | int | None:
    """(method, target, headers as sent, keep-alive, where the next request starts) of the request at ``pos`` of
    ``buf``; None if it has not all arrived yet; an HTTP status (400, 414, 431) for a request that cannot be read.
    Lines end in CRLF or a bare LF (Go accepts both); a body (Content-Length) is skipped."""
    end = buf.find(b"\n", pos)
    if end < 0:
        return 414 if len(buf) - pos > _MAX_LINE else None
    if end - pos > _MAX_LINE:
        return 414
    parts = buf[pos:end].decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return 400
    method, target, version = parts
    headers: dict[str, str] = {}  # the client's case, for the app (its lookups ignore case, as Go's Header.Get)
    length, connection = "0", ""
    for _ in range(_MAX_HEADERS):
        start = end + 1
        end = buf.find(b"\n", start)
        if end < 0:
            return 431 if len(buf) - start > _MAX_LINE else None
        if end - start > _MAX_LINE:
            return 431
        line = buf[start:end]
        if line in (b"", b"\r"):
            break
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            return 400
        name, value = name.strip(), value.strip()
        if name in headers:
            continue  # the first value, as Header.Get
        headers[name] = value
        lower = name.lower()
        if lower == "content-length":
            length = value
        elif lower == "connection":
            connection = value.lower()
    else:
        return 431
    if not length.isdigit():
        return 400
    after = end + 1 + int(length)  # the body is drained, so keep-alive framing stays intact
    if after > len(buf):
        return None
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return method, target, headers, keep_alive, after


_REASONS = {s.value: s.phrase for s in HTTPStatus}
_date_cache: list = [0, ""]


def _http_date() -> str:
    """The Date header (RFC 9110 IMF-fixdate), formatted once a second."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[:] = [now, formatdate(now, usegmt=True)]
    return _date_cache[1]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    app: App
    faults: Faults


class DevnetServer:
    """The whole simulated network behind one loopback listener.

    >>> with DevnetServer(Scenario(ScenarioConfig(seed=1))) as net:
    ...     httpx.get(net.chain_rest_url + "/productscience/inference/inference/get_current_epoch")
    """

    def __init__(self, network: Devnet | Scenario | None = None, *, faults: FaultConfig | None = None,
                 b64_events: bool = False, escrow_max_model_len: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, warm: bool = False, payload_auth: bool = False,
                 host_versions: tuple[str, ...] = ()) -> None:
        if network is None:
            network = Scenario()
        self.devnet = network if isinstance(network, Devnet) else Devnet(network)
        self.faults = Faults(faults or FaultConfig())
        self.faults.host_addresses = {h.name: h.address for h in self.devnet.scenario.hosts}
        options = AppOptions(b64_events, escrow_max_model_len, self.faults.config.lying_host,
                             self.faults.config.serve_upto, payload_auth, host_versions=tuple(host_versions),
                             lying_kind=self.faults.config.lying_kind)
        self.app = App(self.devnet, options)
        if warm:  # pre-encode every diff log and payload (otherwise each is encoded on its first request)
            hostviews.warm(self.devnet, self.faults.config.lying_host, self.faults.config.lying_kind)
        self._address = (host, port)
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def scenario(self) -> Scenario:
        return self.devnet.scenario

    @property
    def url(self) -> str:
        return self.app.base_url

    @property
    def chain_rest_url(self) -> str:
        """Like ``https://<node>/chain-api`` (GONKA_CHAIN_REST_URL)."""
        return f"{self.url}/chain-api"

    @property
    def rpc_url(self) -> str:
        """Like ``https://<node>/chain-rpc`` (GONKA_RPC_URL)."""
        return f"{self.url}/chain-rpc"

    def chain_rest_urls(self, nodes: int) -> list[str]:
        """``nodes`` chain REST URLs of distinct nodes (``Faults.down_nodes`` takes one down)."""
        return [f"{self.url}/nodes/{k}/chain-api" for k in range(nodes)]

    def rpc_urls(self, nodes: int) -> list[str]:
        return [f"{self.url}/nodes/{k}/chain-rpc" for k in range(nodes)]

    def host_url(self, address: str) -> str:
        return self.app.host_url(address)

    def advance_epoch(self) -> int:
        return self.devnet.advance_epoch()

    def advance_to_last_epoch(self) -> "DevnetServer":
        """Advance the clock to the scenario's last epoch (the chain then shows every epoch before it)."""
        while self.devnet.current_epoch < self.scenario.epochs[-1].epoch_index:
            self.advance_epoch()
        return self

    def start(self) -> "DevnetServer":
        httpd = _Server(self._address, _Handler)
        httpd.app, httpd.faults = self.app, self.faults
        host, port = httpd.server_address[:2]
        self.app.base_url = f"http://{host}:{port}"
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), name="devnet-http",
                                        daemon=True)  # short poll interval: quick stop() in tests
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "DevnetServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

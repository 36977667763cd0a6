"""HTTP server for the devnet (stdlib ``ThreadingHTTPServer``, loopback, OS-chosen port).

Fault injection sits in front of routing so every surface can misbehave like a public node:
5xx answers, 429 with ``Retry-After``, slow answers (read timeouts on the client side), and JSON
bodies cut short (a valid HTTP response whose body does not parse). The lying host is data, not
chance: it always serves its diverging diff log. Faults draw from their own seeded RNG, one fixed
sequence of draws per request, so a sequential client sees the same faults on every run.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
    paths: tuple[str, ...] = ()  # only paths with one of these prefixes get faults; () = all but /devnet/
    serve_upto: int | None = None  # hosts serve no diff beyond this nonce (a stuck log; shard detail still
                                   # reports the full nonce): what the poller's progress watchdog must notice


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
        self.injected: dict[str, int] = {"delay": 0, "429": 0, "5xx": 0, "truncate": 0}

    def applies(self, path: str) -> bool:
        if path.startswith("/devnet/"):
            return False
        return not self.config.paths or path.startswith(self.config.paths)

    def draw(self, path: str) -> FaultDecision:
        if not self.applies(path):
            return FaultDecision()
        cfg = self.config
        with self._lock:  # always five draws, so one request's faults never shift the next one's
            r_delay, r_429, r_5xx, r_trunc, r_pick = (self._rng.random() for _ in range(5))
            delay = cfg.delay_seconds if r_delay < cfg.p_delay else 0.0
            status = 429 if r_429 < cfg.p_429 else ((500, 502, 503)[int(r_pick * 3)] if r_5xx < cfg.p_5xx else 0)
            truncate = 0.2 + 0.6 * r_pick if r_trunc < cfg.p_truncate and not status else 0.0
            for key, hit in (("delay", delay), ("429", status == 429), ("5xx", status >= 500), ("truncate", truncate)):
                self.injected[key] += bool(hit)
        return FaultDecision(delay, status, truncate)


def _fault_response(status: int, retry_after: int) -> Response:
    if status == 429:
        resp = Response.text("rate limit exceeded", 429)
        resp.headers["Retry-After"] = str(retry_after)
        return resp
    return Response.text({500: "internal server error", 502: "bad gateway",
                          503: "upstream connect error or disconnect/reset before headers"}[status], status)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real nodes behind a proxy
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid 40 ms delayed-ACK stalls
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 (stdlib naming)
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)  # drain, so keep-alive framing stays intact
        decision = self.server.faults.draw(url.path)
        if decision.delay:
            time.sleep(decision.delay)
        if decision.status:
            resp = _fault_response(decision.status, self.server.faults.config.retry_after)
        else:
            resp = self.server.app.handle(method, url.path, parse_qs(url.query, keep_blank_values=True),
                                          dict(self.headers.items()))
        body = resp.body
        if decision.truncate and resp.status == 200 and len(body) > 1:
            body = body[: max(1, int(len(body) * decision.truncate))]
        try:
            self.send_response(resp.status)
            for key, value in resp.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. its read timeout fired during an injected delay)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # tests and the demo do not want access logs on stderr


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
                 host: str = "127.0.0.1", port: int = 0, warm: bool = False, payload_auth: bool = False) -> None:
        if network is None:
            network = Scenario()
        self.devnet = network if isinstance(network, Devnet) else Devnet(network)
        self.faults = Faults(faults or FaultConfig())
        options = AppOptions(b64_events, escrow_max_model_len, self.faults.config.lying_host,
                             self.faults.config.serve_upto, payload_auth)
        self.app = App(self.devnet, options)
        if warm:  # pre-encode every diff log (otherwise each log is encoded on its first request)
            hostviews.warm(self.devnet, self.faults.config.lying_host)
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

    def host_url(self, address: str) -> str:
        return self.app.host_url(address)

    def advance_epoch(self) -> int:
        return self.devnet.advance_epoch()

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

"""`indexer run`'s HTTP endpoints: GET /metrics (Prometheus text format), /health (200 while the process is alive),
/ready (200 when the database answers and every source's lag is under --ready-max-lag, else 503 with a JSON body
naming what is not ready). Served from a daemon thread; binding happens before the poller starts, so an address in
use stops the start (exit 2) instead of running without metrics. All requests share the metrics' one database reader
(:class:`indexer.observe.metrics.DatabaseReader`); a request that fails (a scraper that hung up) is logged as one
line."""
from __future__ import annotations

import errno
import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from indexer.observe.metrics import Metrics
from indexer.settings import ConfigError

log = logging.getLogger(__name__)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of scrapes waits in the listen queue instead of being refused

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        log.warning("metrics: request from %s failed: %s: %s", client_address[0], type(exc).__name__, exc)


def parse_addr(text: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6]:PORT`` too) or ``off``."""
    if text.strip().lower() == "off":
        return None
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--metrics-addr wants HOST:PORT or off, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


class MetricsServer:
    def __init__(self, addr: tuple[str, int], url: str, max_lag: float, metrics: Metrics | None = None,
                 rules=None) -> None:
        self.metrics = metrics or Metrics(url, max_lag, rules)
        self.url, self.max_lag = url, max_lag
        handler = _handler(self)
        try:
            self.httpd = _Server(addr, handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"--metrics-addr {addr[0]}:{addr[1]} is already in use (another indexer run? give "
                                  "each its own address, or off)") from None
            raise ConfigError(f"--metrics-addr {addr[0]}:{addr[1]}: {exc.strerror or exc}") from None
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="metrics-http", daemon=True)

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{host}:{port}"

    def retarget(self, url: str) -> None:
        """Read another database URL from now on (the embedded server restarted on another port)."""
        self.url = url
        self.metrics.reader.retarget(url)

    def start(self) -> "MetricsServer":
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.metrics.reader.close()

    def __enter__(self) -> "MetricsServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _handler(server: MetricsServer):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(server.metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/health":
                self._send(200, b'{"alive": true}\n', "application/json")
            elif path == "/ready":
                ok, body = server.metrics.reader.readiness()
                self._send(200 if ok else 503, json.dumps(body).encode() + b"\n", "application/json")
            else:
                self._send(404, b'{"error": "not found: try /metrics, /health or /ready"}\n', "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args) -> None:  # noqa: A002 - scrapes every 15 s would flood stderr
            pass

    return Handler

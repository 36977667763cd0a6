"""A webhook receiver on loopback that records every request and can be told to be down, and a probe rule the
tests switch on and off through a table."""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from indexer.alerts.rules import Rule
from tests.support.listeners import close_listener

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)

PROBE_SQL = """SELECT 'probe:' || k AS alert_key, severity, participant, epoch_index, 'probe ' || k || ' ' || v AS summary,
                      jsonb_build_object('v', v) AS details FROM public.probe"""
PROBE = Rule("probe", Path("probe.sql"), PROBE_SQL)


def make_probe(conn) -> None:
    conn.execute("CREATE TABLE public.probe (k text PRIMARY KEY, v text NOT NULL DEFAULT 'a', "
                 "severity text NOT NULL DEFAULT 'warning', participant text, epoch_index bigint)")


@dataclass
class Received:
    path: str
    headers: dict
    body: dict
    answered: int
    at: float = field(default_factory=time.monotonic)


@dataclass
class Receiver:
    """status: what to answer (None: drop the connection without answering, like a receiver that is down);
    answer: the body it answers with (a callable gets the request's path, like a proxy that echoes it)."""
    status: int | None = 200
    answer: object = b"ok"
    requests: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status = receiver.status
                receiver.requests.append(Received(self.path, dict(self.headers), body, status or 0))
                if status is None:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                answer = receiver.answer(self.path) if callable(receiver.answer) else receiver.answer
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *a) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def delivered(self) -> list[Received]:
        return [r for r in self.requests if 200 <= r.answered < 300]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Dripping:
    """A receiver on a plain socket that answers ``200`` with ``Content-Length: 40`` one byte every ``pace``
    seconds (``head=True``: the status line and headers too), until the client hangs up or :meth:`close`.
    ``received`` is set when a request has arrived; ``keys`` are the requests' idempotency keys; ``hung_up`` holds
    the monotonic time each connection ended."""

    def __init__(self, pace: float = 0.3, head: bool = False) -> None:
        self.pace, self.head = pace, head
        self.received, self.stop = threading.Event(), threading.Event()
        self.keys: list[str] = []
        self.hung_up: list[float] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
            while len(body) < int(headers.get(b"Content-Length", b"0")):
                body += conn.recv(65536)
            self.keys.append(headers.get(b"Idempotency-Key", b"").decode())
            self.received.set()
            status, rest = b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n", b"x" * 40
            if not self.head:
                conn.sendall(status)
                status = b""
            try:
                for byte in status + rest:
                    if self.stop.wait(self.pace):  # the receiver's own slowness, not a test's synchronisation
                        break
                    conn.sendall(bytes([byte]))
            except OSError:
                pass  # the client gave up and closed the connection
            finally:
                self.hung_up.append(time.monotonic())

    def close(self) -> None:
        self.stop.set()
        close_listener(self.sock)

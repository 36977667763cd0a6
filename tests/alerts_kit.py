"""A webhook receiver on loopback that records every request and can be told to be down, and a probe rule the
tests switch on and off through a table."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from indexer.alerts.rules import Rule

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


@dataclass
class Receiver:
    """status: what to answer (None: drop the connection without answering, like a receiver that is down)."""
    status: int | None = 200
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
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

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

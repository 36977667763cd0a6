"""One notification POST under a wall-clock deadline, reading a bounded answer.

httpx's timeouts bound each network operation, not the request: a receiver that answers one byte every few seconds
keeps a send alive for as long as it likes, past the delivery's lease, and another worker then sends the same
notification again. Here a watchdog timer shuts the connection's socket down when the deadline passes, which wakes the
blocked read at once (headers or body, plain or TLS), and the send fails with :class:`DeadlineExceeded`. At most
``MAX_ANSWER`` bytes of the answer are read: the delivery only needs the status and the start of an error text.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass

import httpx

MAX_ANSWER = 4096  # bytes of a receiver's answer kept (the error text stored is shorter still)


class DeadlineExceeded(Exception):
    """The receiver did not answer completely within the send's deadline."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most MAX_ANSWER bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class _Watchdog:
    """Holds a duplicate of the connection's socket descriptor (taken when httpcore reports the TCP connection) and
    shuts that socket down when the deadline fires. The duplicate makes the shutdown safe even after httpx closed
    its own descriptor (a closed number could be reused by another connection; ours cannot)."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def trace(self, event: str, info: dict) -> None:
        if event == "connection.connect_tcp.complete":
            sock = info["return_value"].get_extra_info("socket")
            with self._lock:
                if sock is not None and self._fd is None:
                    self._fd = os.dup(sock.fileno())
                if self.fired:
                    self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._fd is None:
            return
        try:
            with socket.socket(fileno=os.dup(self._fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the peer or by httpx: nothing left to wake

    def __enter__(self) -> "_Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def post(client: httpx.Client, url: str, content: bytes, headers: dict, deadline: float) -> Answer:
    """POST ``content`` and return the answer, or raise :class:`DeadlineExceeded` once ``deadline`` seconds have
    passed (connecting, sending and reading included), or httpx's error. The connection is not kept for reuse: the
    watchdog needs to see each request's own connection."""
    started = time.monotonic()
    headers = {**headers, "Connection": "close"}
    with _Watchdog(deadline) as dog:
        try:
            with client.stream("POST", url, content=content, headers=headers,
                               extensions={"trace": dog.trace}) as response:
                body = bytearray()
                for chunk in response.iter_raw():
                    body += chunk
                    if len(body) >= MAX_ANSWER or time.monotonic() - started > deadline:
                        break
                if time.monotonic() - started > deadline:
                    raise DeadlineExceeded(f"no complete answer within {deadline:g} s")
                return Answer(response.status_code, bytes(body[:MAX_ANSWER]))
        except httpx.HTTPError:
            if dog.fired:
                raise DeadlineExceeded(f"no complete answer within {deadline:g} s") from None
            raise

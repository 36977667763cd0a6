"""FastClient never sends a POST twice (an Attach's nonce is taken once: a second copy is refused), and a kept-alive
connection the server closed while idle is replaced before a POST is written on it. Real sockets on loopback."""
from __future__ import annotations

import socket
import threading

import httpx
import pytest

from indexer.sources.gonka.fastclient import FastClient
from indexer.sources.gonka.http import Fetcher, FetchError, RetryPolicy


class OneShotServer:
    """A raw HTTP/1.1 server whose connections follow a script: for connection i, ``script[i]`` is a list of
    actions, one per request read: ``"answer"`` (200, kept alive), ``"reset"`` (the request is read whole, then the
    connection is closed unanswered), ``"answer-close"`` (answered, then closed; ``closed`` is set)."""

    def __init__(self, script: list[list[str]]) -> None:
        self.script = script
        self.bodies: list[bytes] = []  # the body of every POST read, in order
        self.closed = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for actions in self.script:
            conn, _ = self.sock.accept()
            with conn, conn.makefile("rb") as reader:
                for action in actions:
                    head = []
                    while (line := reader.readline()) not in (b"\r\n", b""):
                        head.append(line.decode("latin-1").strip())
                    if not head:
                        break
                    length = next((int(h.split(":", 1)[1]) for h in head if h.lower().startswith("content-length:")),
                                  0)
                    body = reader.read(length) if length else b""
                    if head[0].startswith("POST"):
                        self.bodies.append(body)
                    if action == "reset":
                        conn.shutdown(socket.SHUT_RDWR)
                        break
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                    if action == "answer-close":
                        conn.shutdown(socket.SHUT_RDWR)
                        self.closed.set()
                        break
        self.sock.close()


def test_a_post_the_server_took_before_the_connection_broke_is_not_sent_again():
    server = OneShotServer([["answer", "reset"], ["answer"]])
    fast = FastClient(timeout=5)
    assert fast.post(server.url + "/attach", b'{"nonce":"1"}').status_code == 200
    with pytest.raises(httpx.RemoteProtocolError):
        fast.post(server.url + "/attach", b'{"nonce":"2"}')  # taken, then the connection broke unanswered
    assert server.bodies == [b'{"nonce":"1"}', b'{"nonce":"2"}']  # the second body reached the server once
    fast.close()


def test_post_json_once_is_one_post_even_on_a_reused_connection_that_breaks():
    server = OneShotServer([["answer", "reset"], ["answer"]])
    fast = FastClient(timeout=5)
    http = Fetcher(server.url, client=fast, policy=RetryPolicy(attempts=3, sleep=lambda s: None))
    assert http.post_json("/attach", b"A", once=True) == {}
    with pytest.raises(FetchError) as err:
        http.post_json("/attach", b"B", once=True)
    assert err.value.transient  # the caller builds a new body and tries again
    assert server.bodies == [b"A", b"B"]
    fast.close()


def test_a_connection_closed_while_idle_is_replaced_before_a_post_is_written_on_it():
    server = OneShotServer([["answer-close"], ["answer"]])
    fast = FastClient(timeout=5)
    assert fast.post(server.url + "/attach", b"A").status_code == 200
    assert server.closed.wait(5)
    assert fast.post(server.url + "/attach", b"B").status_code == 200  # on a fresh connection, sent once
    assert server.bodies == [b"A", b"B"]
    fast.close()


def test_a_get_is_still_sent_again_after_a_reset_on_a_reused_connection():
    server = OneShotServer([["answer", "reset"], ["answer"]])
    fast = FastClient(timeout=5)
    assert fast.get(server.url + "/a").status_code == 200
    assert fast.get(server.url + "/b").status_code == 200  # the reset GET went again on a new connection
    fast.close()

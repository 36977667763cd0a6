"""A hostile peer on loopback: a small HTTP server, optionally a proxy in front of the devnet, whose misbehaviour per
route is declared in one line.

    proxy = Hostile(upstream=net.url).start()
    proxy.on(r"/hosts/h3/devshard/healthz$", json_answer({"not": "a list"}))
    proxy.on(r"/nodes/0/", status(403))
    proxy.on(r"/diffs$", trickle(b"HTTP/1.1 200 OK\\r\\n", every=0.5))

A route is a regular expression searched in the request path (without the query); the first declared match answers
(``proxy.hits[pattern]`` counts its requests, ``proxy.seen`` lists their targets). Requests no route matches are relayed to ``upstream`` as they are
(path, query, headers), or answered 404 without one. :func:`hostile_devnet` puts the proxy in front of a whole
devnet, chain and hosts (the participants' ``inference_url`` s point at the proxy), so an attack on one route leaves
every other answer honest.

A behaviour is a callable ``(request, peer) -> bool``: it writes its answer on ``peer`` (:class:`Peer`) and says whether
the connection may serve another request. Those below cover the attacks of the poller's tests; a new one is a
function of a few lines.
"""
from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

from tests.support.listeners import close_listener

MAX_REQUEST = 64 * 1024


@dataclass
class Request:
    method: str
    target: str
    path: str
    headers: dict[str, str]


class Peer:
    """One client connection as a behaviour sees it: ``sendall``, the server's ``stop`` event, ``relay(request)``
    (the upstream's (status, headers, body))."""

    def __init__(self, sock: socket.socket, stop: threading.Event, relay: Callable) -> None:
        self.sock, self.stop, self.relay = sock, stop, relay

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)


Behaviour = Callable[[Request, Peer], bool]


def _head(status: int, headers: dict[str, str] | None = None, length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {http.client.responses.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def status(code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Behaviour:
    """A well-framed answer of status ``code``."""
    def answer(req: Request, conn: Peer) -> bool:
        conn.sendall(_head(code, headers, len(body)) + body)
        return True
    return answer


def json_answer(obj: Any, code: int = 200) -> Behaviour:
    """A well-framed JSON answer (any JSON: the wrong shape is the point)."""
    return status(code, json.dumps(obj).encode(), {"Content-Type": "application/json"})


def raw(data: bytes) -> Behaviour:
    """These bytes, then the connection is closed."""
    def answer(req: Request, conn: Peer) -> bool:
        conn.sendall(data)
        return False
    return answer


def streamed(head: bytes, chunk: bytes, total: int) -> Behaviour:
    """``head``, then ``chunk`` repeated up to ``total`` bytes (stopping when the client hangs up), then close."""
    def answer(req: Request, conn: Peer) -> bool:
        conn.sendall(head)
        sent = 0
        with contextlib.suppress(OSError):
            while sent < total:
                conn.sendall(chunk)
                sent += len(chunk)
        return False
    return answer


class Trickle:
    """``data`` one byte every ``every`` seconds (never finishing an answer on time), until the client hangs up or
    the server stops."""

    def __init__(self, data: bytes, every: float) -> None:
        self.data, self.every = data, every

    def __call__(self, req: Request, conn: Peer) -> bool:
        stop = conn.stop
        with contextlib.suppress(OSError):
            for i in range(len(self.data)):
                conn.sendall(self.data[i:i + 1])
                if stop.wait(self.every):
                    break
        return False


def trickle(data: bytes, every: float) -> Behaviour:
    return Trickle(data, every)


class Silent:
    """No answer at all: the request is read and the connection kept open, unanswered, until the client hangs up or
    the server stops (a host that accepts connections and never answers)."""

    def __call__(self, req: Request, conn: Peer) -> bool:
        conn.sock.settimeout(0.1)  # to look at the stop event between reads; the client decides when to hang up
        while not conn.stop.is_set():
            try:
                if not conn.sock.recv(65536):
                    break
            except socket.timeout:
                continue
            except OSError:
                break
        return False


def silent() -> Behaviour:
    return Silent()


def rewrite(fn: Callable[[Any, Request], Any], target: Callable[[str], str] | None = None) -> Behaviour:
    """The upstream's answer with its JSON replaced by ``fn(json, request)`` (status and height header kept);
    ``target``: what the upstream is asked instead of the request target."""
    def answer(req: Request, conn: Peer) -> bool:
        asked = req if target is None else Request(req.method, target(req.target), req.path, req.headers)
        code, headers, body = conn.relay(asked)
        if code == 200:
            body = json.dumps(fn(json.loads(body), req)).encode()
        conn.sendall(_head(code, headers, len(body)) + body)
        return True
    return answer


class Hostile:
    """The server. ``on(pattern, behaviour)`` declares a route; ``hits`` counts requests per pattern (and
    ``"relayed"``)."""

    def __init__(self, upstream: str | None = None) -> None:
        self.upstream = upstream
        self.routes: list[tuple[re.Pattern, str, Behaviour]] = []
        self.hits: Counter = Counter()
        self.seen: list[str] = []  # the targets the routes answered, in order
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()

    def on(self, pattern: str, behaviour: Behaviour) -> "Hostile":
        with self._lock:
            self.routes.append((re.compile(pattern), pattern, behaviour))
        return self

    def start(self) -> "Hostile":
        t = threading.Thread(target=self._accept, name="hostile-accept", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        close_listener(self._sock)
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> "Hostile":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(conn)
            t = threading.Thread(target=self._serve, args=(conn,), name="hostile-conn", daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        peer = Peer(conn, self._stop, self._relay)
        buf = b""
        try:
            while not self._stop.is_set():
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data or len(buf) > MAX_REQUEST:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, target = lines[0].split(" ")[:2]
                headers = dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines[1:]))
                req = Request(method, target, target.split("?", 1)[0], headers)
                if not self._answer(req, peer):
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _answer(self, req: Request, conn: Peer) -> bool:
        for rx, pattern, behaviour in list(self.routes):
            if rx.search(req.path):
                with self._lock:
                    self.hits[pattern] += 1
                    self.seen.append(req.target)
                return behaviour(req, conn)
        with self._lock:
            self.hits["relayed"] += 1
        if self.upstream is None:
            conn.sendall(_head(404, None, 0))
            return True
        code, headers, body = self._relay(req)
        conn.sendall(_head(code, headers, len(body)) + body)
        return True

    def _relay(self, req: Request) -> tuple[int, dict[str, str], bytes]:
        up = urlsplit(self.upstream)
        c = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
        try:
            sent = {k: v for k, v in req.headers.items() if k.lower() not in ("host", "connection")}
            c.request(req.method, req.target, headers=sent)
            r = c.getresponse()
            body = r.read()
            keep = {k: v for k, v in r.getheaders()
                    if k.lower() in ("content-type", "retry-after") or "block-height" in k.lower()}
            return r.status, keep, body
        finally:
            c.close()


@contextlib.contextmanager
def hostile_devnet(network: Any, **devnet_kw: Any) -> Iterator[tuple[Any, Hostile]]:
    """A devnet (``DevnetServer(network, **devnet_kw)``) with a :class:`Hostile` proxy in front of all of it: chain
    URLs from ``proxy.url`` and every participant's ``inference_url`` through the proxy. Yields (devnet, proxy)."""
    from indexer.devnet import DevnetServer

    with DevnetServer(network, **devnet_kw) as net:
        upstream = net.url
        with Hostile(upstream=upstream) as proxy:
            net.app.base_url = proxy.url  # inference_url = <proxy>/hosts/<name>
            try:
                yield net, proxy
            finally:
                net.app.base_url = upstream

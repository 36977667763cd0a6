"""A small keep-alive HTTP/1.1 GET client on plain sockets, for the poller's hot path.

httpx costs ≈ 375 µs of CPU per request in this process; a poll makes one request per 0/0 Finish payload and
per diff page, so on one core that alone caps throughput. :class:`FastClient` has the subset of ``httpx.Client``
that :class:`~indexer.sources.gonka.http.Fetcher` uses (``get(url, params=, headers=, timeout=)`` → an object with
``status_code``, ``content``, ``headers``, ``url``, ``text``) at ≈ 60 µs (no email-style header parsing, as
``http.client`` does), and raises httpx's exception types, so
the retry policy (and its tests on ``httpx.MockTransport``) stay as they are.

Connections are kept per thread and origin (thread-safe without locks on the request path). A request on a reused
connection that the server closed meanwhile is retried once on a fresh connection, as any keep-alive client does.
:meth:`FastClient.get_many` pipelines a batch of GETs to one origin (the payload requests of an escrow: one round
trip and one send for the batch instead of one each; on loopback it halves both sides' CPU per request).
"""
from __future__ import annotations

import http.client
import socket
import ssl
import threading
from typing import Any, Mapping, Sequence
from urllib.parse import quote, urlencode, urlsplit

import httpx

USER_AGENT = "devshard-indexer"
# The largest answer the network gives is a few MB (a tx_search page of 100 txs, a diff-log page of 64 diffs, a
# stored response payload). A peer that announces or sends more is broken or hostile, and reading its answer whole
# would take the poller's memory and with it every other escrow's capture: it is refused instead, without reading it.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_HEADER_LINES = 256


class ResponseTooLarge(httpx.TransportError):
    """An answer over :data:`MAX_RESPONSE_BYTES` (or with more than :data:`MAX_HEADER_LINES` header lines), refused
    after reading at most that much. The Fetcher treats it as any transport error: tried again, then another node
    or group member, each try bounded in memory."""


class _TooLarge(http.client.HTTPException):
    """Raised while reading an answer; the connection is dropped and the request gets a ResponseTooLarge."""


class Headers(dict):
    """Response headers, case-insensitive on ``get`` (enough for ``Retry-After`` and the block height)."""

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> Any:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.lower() if isinstance(key, str) else key)


class Response:
    __slots__ = ("status_code", "content", "headers", "url")

    def __init__(self, status_code: int, content: bytes, headers: Headers, url: str) -> None:
        self.status_code, self.content, self.headers, self.url = status_code, content, headers, url

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class _Conn:
    """One HTTP/1.1 connection: request line and headers out, status line, headers and body in (Content-Length,
    chunked, or until close). No email-style header parsing: a header line is split at its first colon."""

    def __init__(self, scheme: str, netloc: str, timeout: float, ssl_context: ssl.SSLContext | None) -> None:
        host, _, port = netloc.rpartition(":") if netloc.rsplit(":", 1)[-1].isdigit() else (netloc, "", "")
        host = host.strip("[]")
        self.host_header = netloc
        sock = socket.create_connection((host, int(port) if port else (443 if scheme == "https" else 80)),
                                        timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            assert ssl_context is not None
            sock = ssl_context.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.timeout = timeout

    def close(self) -> None:
        try:
            self.rfile.close()
        finally:
            self.sock.close()

    def send(self, requests: Sequence[tuple[str, Mapping[str, str]]], timeout: float) -> None:
        """Write GET requests (target, headers) back to back, in one send."""
        if timeout != self.timeout:
            self.sock.settimeout(timeout)
            self.timeout = timeout
        out = []
        for target, headers in requests:
            lines = [f"GET {target} HTTP/1.1", f"Host: {self.host_header}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            out.append("\r\n".join(lines) + "\r\n\r\n")
        self.sock.sendall("".join(out).encode("latin-1"))

    def response(self) -> tuple[int, Headers, bytes, bool]:
        """The next response on the connection: (status, headers, body, the server closes after it)."""
        rfile = self.rfile
        status_line = rfile.readline(65537)
        if not status_line:
            raise http.client.RemoteDisconnected("connection closed before the status line")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise http.client.BadStatusLine(status_line.decode("latin-1", "replace").strip())
        status = int(parts[1])
        out = Headers()
        for _ in range(MAX_HEADER_LINES + 1):
            line = rfile.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            out[name.strip().lower()] = value.strip()
        else:
            raise _TooLarge(f"more than {MAX_HEADER_LINES} header lines")
        close = out.get("connection", "").lower() == "close" or parts[0] == b"HTTP/1.0"
        if status in (204, 304) or 100 <= status < 200:
            return status, out, b"", close
        if "chunked" in out.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                size_line = rfile.readline(65537)
                if not size_line:
                    raise http.client.IncompleteRead(bytes(body))
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if len(body) + size > MAX_RESPONSE_BYTES:
                    raise _TooLarge(f"a chunked body past {MAX_RESPONSE_BYTES} bytes")
                if size == 0:
                    while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunk = rfile.read(size + 2)
                if len(chunk) < size + 2:
                    raise http.client.IncompleteRead(bytes(body))
                body += chunk[:size]
            return status, out, bytes(body), close
        length = out.get("content-length")
        if length is not None:
            n = int(length)
            if n > MAX_RESPONSE_BYTES:
                raise _TooLarge(f"Content-Length {n} over {MAX_RESPONSE_BYTES} bytes")
            body = rfile.read(n)
            if len(body) < n:
                raise http.client.IncompleteRead(body, n - len(body))
            return status, out, body, close
        body = rfile.read(MAX_RESPONSE_BYTES + 1)  # no framing: the body ends with the connection
        if len(body) > MAX_RESPONSE_BYTES:
            raise _TooLarge(f"an unframed body past {MAX_RESPONSE_BYTES} bytes")
        return status, out, body, True


class FastClient:
    def __init__(self, timeout: float = 10.0, ssl_context: ssl.SSLContext | None = None) -> None:
        """``ssl_context``: how https peers are verified (default: the system's trust store, hostname checked)."""
        self.timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[_Conn] = []
        self._serial: set[tuple[str, str]] = set()  # origins found not to answer pipelined requests
        self._ssl: ssl.SSLContext | None = ssl_context

    def _conn(self, scheme: str, netloc: str, timeout: float) -> tuple[_Conn, bool]:
        conns = self._local.__dict__.setdefault("conns", {})
        conn = conns.get((scheme, netloc))
        if conn is not None:
            return conn, True
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {scheme!r}")
        if scheme == "https" and self._ssl is None:
            self._ssl = ssl.create_default_context()
        conn = _Conn(scheme, netloc, timeout, self._ssl)
        conns[(scheme, netloc)] = conn
        with self._lock:
            self._all.append(conn)
        return conn, False

    def _drop(self, scheme: str, netloc: str) -> None:
        conn = self._local.__dict__.get("conns", {}).pop((scheme, netloc), None)
        if conn is not None:
            conn.close()

    def get(self, url: str, params: Mapping[str, Any] | None = None, headers: Mapping[str, str] | None = None,
            timeout: float | None = None) -> Response:
        answer = self.get_many([(url, params, headers)], timeout)[0]
        if isinstance(answer, Exception):
            raise answer
        assert answer is not None  # a lone request is answered or has the error that ended its connection
        return answer

    def get_many(self, requests: Sequence[tuple[str, Mapping[str, Any] | None, Mapping[str, str] | None]],
                 timeout: float | None = None) -> list[Response | httpx.HTTPError | None]:
        """GET requests (url, params, headers) to one origin, pipelined on this thread's connection: all written
        at once, the answers read in order (HTTP/1.1 pipelining, RFC 9112 §9.3.2: a server answers them one by one,
        as Go's net/http does). One entry per request: its :class:`Response`; for the first request left
        unanswered, the transport error that ended the connection (httpx's type, as :meth:`get` raises); None for
        a request never answered that may simply be sent again (the server closed the connection after an earlier
        answer, as keep-alive servers do after a number of requests)."""
        prepared = [self._prepare(url, params, headers) for url, params, headers in requests]
        origins = {(scheme, netloc) for scheme, netloc, _, _, _ in prepared}
        if len(origins) > 1:
            raise ValueError(f"get_many takes requests to one origin, got {sorted(origins)}")
        if len(prepared) > 1 and origins <= self._serial:  # a server (or proxy) that does not answer pipelines
            return [self._pipeline([one], timeout)[0] for one in prepared]
        return self._pipeline(prepared, timeout)

    def _pipeline(self, prepared: list, timeout: float | None) -> list[Response | httpx.HTTPError | None]:
        results: list[Response | httpx.HTTPError | None] = [None] * len(prepared)
        if not prepared:
            return results
        scheme, netloc = prepared[0][0], prepared[0][1]
        timeout = self.timeout if timeout is None else timeout
        done = 0
        for attempt in (0, 1):
            reused, answered = False, 0
            try:
                conn, reused = self._conn(scheme, netloc, timeout)
                conn.send([(target, hdrs) for _, _, target, _, hdrs in prepared[done:]], timeout)
                while done < len(prepared):
                    status, out, body, close = conn.response()
                    results[done] = Response(status, body, out, prepared[done][3])
                    done += 1
                    answered += 1
                    if close:  # the server ends the connection here: the rest were not answered
                        self._drop(scheme, netloc)
                        break
                return results
            except (socket.timeout, TimeoutError) as exc:
                error: httpx.HTTPError = httpx.ReadTimeout(f"timed out: {exc}")
                if answered:
                    # answered the first requests of the batch and then nothing: a server or proxy that reads one
                    # request at a time and drops what came with it. Its origin gets one request at a time from now
                    with self._lock:
                        self._serial.add((scheme, netloc))
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    ConnectionAbortedError) as exc:
                self._drop(scheme, netloc)
                if answered:
                    return results  # closed after an answer: what is left was never taken, send it again
                if reused and attempt == 0:
                    continue  # the server closed an idle keep-alive connection: once more on a new one
                error = httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}")
            except _TooLarge as exc:
                error = ResponseTooLarge(f"response refused: {exc}")
            except (ConnectionRefusedError, socket.gaierror) as exc:
                error = httpx.ConnectError(f"{type(exc).__name__}: {exc}")
            except (OSError, ValueError, http.client.HTTPException) as exc:
                error = httpx.TransportError(f"{type(exc).__name__}: {exc}")
            self._drop(scheme, netloc)
            results[done] = error
            return results
        raise AssertionError("unreachable")

    @staticmethod
    def _prepare(url: str, params: Mapping[str, Any] | None,
                 headers: Mapping[str, str] | None) -> tuple[str, str, str, str, dict[str, str]]:
        """(scheme, netloc, request target, the URL as shown, headers) of one GET."""
        parts = urlsplit(url)
        target = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
        query = parts.query
        if params:
            query = (query + "&" if query else "") + urlencode(params)
        if query:
            target += "?" + query
        hdrs = {"User-Agent": USER_AGENT, "Accept": "*/*"}
        if headers:
            hdrs.update(headers)
        return parts.scheme, parts.netloc, target, f"{parts.scheme}://{parts.netloc}{target}", hdrs

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()

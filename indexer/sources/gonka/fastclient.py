"""A small keep-alive HTTP/1.1 GET client on plain sockets, for the poller's hot path.

httpx costs ≈ 375 µs of CPU per request in this process; a poll makes one request per 0/0 Finish payload and
per diff page, so on one core that alone caps throughput. :class:`FastClient` has the subset of ``httpx.Client``
that :class:`~indexer.sources.gonka.http.Fetcher` uses (``get(url, params=, headers=, timeout=)`` → an object with
``status_code``, ``content``, ``headers``, ``url``, ``text``) at ≈ 85 µs on loopback (a 4 KB answer), and raises
httpx's exception types, so the retry policy (and its tests on ``httpx.MockTransport``) stay as they are.

Every peer is untrusted, so answers are parsed by h11, the maintained HTTP/1.1 parser httpx is built on, rather than
by hand (RFC 9112 framing: a negative or malformed Content-Length or chunk size is a protocol error, not a read to
the end; h11 costs ≈ 65 µs of the 85 per answer), each under a total deadline (:class:`DeadlineExceeded`: a peer that trickles its
headers or body cannot hold a request longer than that) and a size limit (:class:`ResponseTooLarge`). TLS failures
and non-HTTP schemes raise :class:`PermanentTransportError`: trying again cannot help.

Connections are kept per thread and origin (thread-safe without locks on the request path). A GET on a reused
connection that the server closed meanwhile is sent once more on a fresh connection, as any keep-alive client does.
A POST never is: the server may have taken it before the connection broke (an Attach's nonce, taken once, is refused
the second time), so its caller decides. A reused connection is checked before a POST is written on it: one the
server has closed (or that holds bytes nobody asked for) is replaced first, so a stale keep-alive costs no POST.
:meth:`FastClient.get_many` pipelines a batch of GETs to one origin (the payload requests of an escrow: one round
trip and one send for the batch instead of one each; on loopback it halves both sides' CPU per request).
"""
from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote, urlencode, urlsplit

import h11
import httpx

USER_AGENT = "devshard-indexer"
# The largest answer the network gives is a few MB (a tx_search page of 100 txs, a diff-log page of 64 diffs, a
# stored response payload). A peer that announces or sends more is broken or hostile, and reading its answer whole
# would take the poller's memory and with it every other escrow's capture: it is refused instead, without reading it.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024   # status line and headers together
DEFAULT_DEADLINE = 60.0         # seconds one answer may take in all, however its bytes trickle in
_KEPT_BUFFER = 4 * 1024 * 1024  # the largest body buffer a connection keeps between answers
_RECV = 16 * 1024  # reads of a head (and of bodies h11 frames); sized bodies are read whole


class ResponseTooLarge(httpx.TransportError):
    """An answer over :data:`MAX_RESPONSE_BYTES` (or headers over :data:`MAX_HEADER_BYTES`), refused after reading
    at most that much. The Fetcher treats it as any transport error: tried again, then another node or group
    member, each try bounded in memory."""


class DeadlineExceeded(httpx.ReadTimeout):
    """An answer that did not complete within the client's total deadline (a peer trickling bytes keeps each read
    short of the read timeout). The Fetcher does not try that base URL again for the request."""


class PermanentTransportError(httpx.TransportError):
    """A failure that trying again cannot mend: a TLS certificate or handshake failure, a scheme that is not
    http or https, a target the URL guard refuses. The Fetcher fails over without retrying."""


class _Deadline(Exception):
    """Raised while reading an answer past its deadline; the request gets a DeadlineExceeded."""


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
    """One HTTP/1.1 connection. Requests are written by hand (only our own GETs); answers are parsed by h11, a
    maintained HTTP/1.1 parser (the one httpx is built on), fed from the socket under a total deadline per answer."""

    def __init__(self, scheme: str, netloc: str, timeout: float, ssl_context: ssl.SSLContext | None,
                 address: tuple[str, int] | None = None) -> None:
        host, _, port = netloc.rpartition(":") if netloc.rsplit(":", 1)[-1].isdigit() else (netloc, "", "")
        host = host.strip("[]")
        self.host_header = netloc
        # ``address``: the vetted IP to connect to (a guarded origin), so that a second name lookup cannot differ
        target = address or (host, int(port) if port else (443 if scheme == "https" else 80))
        sock = socket.create_connection(target, timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            assert ssl_context is not None
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            except ssl.SSLError as exc:  # certificate, hostname, protocol: the same on every try
                sock.close()
                raise PermanentTransportError(f"TLS: {exc}") from None
            except BaseException:
                sock.close()
                raise
        self.sock = sock
        self.timeout = timeout
        self.parser = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.buffer = bytearray(_RECV)
        self.view = memoryview(self.buffer)
        self.body_buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def stale(self) -> bool:
        """Whether the idle connection cannot take a request: the server closed it (the end of the stream is
        readable), or sent bytes no request asked for. Either way it is not reused."""
        pending = self.sock.pending() if isinstance(self.sock, ssl.SSLSocket) else 0
        try:
            return pending > 0 or bool(select.select([self.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def send(self, requests: Sequence[tuple[str, Mapping[str, str], bytes | None]], timeout: float) -> None:
        """Write requests (target, headers, body) back to back, in one send: a GET without a body, a POST with
        one (its Content-Length set here)."""
        self.sock.settimeout(timeout)  # reads may have shortened it to meet a deadline
        self.timeout = timeout
        out = []
        for target, headers, body in requests:
            method = "GET" if body is None else "POST"
            lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            if body is not None:
                lines.append(f"Content-Length: {len(body)}")
            out.append(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        self.sock.sendall(b"".join(out))

    def _recv_into(self, view: memoryview, deadline: float) -> int:
        """One read into ``view`` (0 at the end of the stream), under the read timeout and ``deadline``."""
        return self._read(self.sock.recv_into, view, deadline)

    def _read(self, read: Callable, arg: Any, deadline: float) -> Any:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Deadline("the answer did not complete within its deadline")
        self.sock.settimeout(min(self.timeout, left))
        try:
            return read(arg)
        except (socket.timeout, TimeoutError):
            if left <= self.timeout:  # the read was cut short by the deadline, not by the read timeout
                raise _Deadline("the answer did not complete within its deadline") from None
            raise

    def response(self, target: str, deadline: float, method: str = "GET") -> tuple[int, Headers, bytes, bool]:
        """The next response on the connection: (status, headers, body, the server closes after it), read before
        ``deadline`` (time.monotonic()) or not at all (:class:`_Deadline`)."""
        parser = self.parser
        # the parser tracks one request/answer cycle at a time: it is told of each request (already on the wire)
        # just before its answer is read, so pipelined answers are framed one after the other
        # (a POST's body is already on the wire too: announced without a length, h11 takes it as sent)
        parser.send(h11.Request(method=method, target=target, headers=[("Host", self.host_header)]))
        parser.send(h11.EndOfMessage())
        status, out, body, got = 0, Headers(), bytearray(), False
        while True:
            event = parser.next_event()
            if event is h11.NEED_DATA:
                n = self._recv_into(self.view, deadline)
                if not n and not got and status == 0:
                    raise http.client.RemoteDisconnected("connection closed before the status line")
                got = got or n > 0
                parser.receive_data(self.view[:n])  # h11 copies what it keeps
            elif isinstance(event, h11.Response):
                status = event.status_code
                for name, value in event.headers:
                    out[name.decode("latin-1")] = value.decode("latin-1")
                length = out.get("content-length")
                if length is not None and int(length) > MAX_RESPONSE_BYTES:
                    raise _TooLarge(f"Content-Length {length} over {MAX_RESPONSE_BYTES} bytes")
                if length is not None and "transfer-encoding" not in out and status not in (204, 304):
                    return self._sized_body(status, out, int(length), event.http_version, deadline)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_RESPONSE_BYTES:
                    raise _TooLarge(f"a body past {MAX_RESPONSE_BYTES} bytes")
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise http.client.RemoteDisconnected("connection closed before the answer")
            # h11.InformationalResponse (1xx): the final answer follows
        close = parser.their_state is not h11.DONE or parser.our_state is not h11.DONE
        if not close:
            parser.start_next_cycle()
        return status, out, bytes(body), close

    def _sized_body(self, status: int, out: Headers, length: int, version: bytes,
                    deadline: float) -> tuple[int, Headers, bytes, bool]:
        """The body of an answer whose head h11 parsed and framed by a Content-Length it validated (a single
        non-negative decimal, at most MAX_RESPONSE_BYTES), read straight into its buffer: h11 passing a large
        body through its own buffer costs ten times the plain read. Bytes past the body (pipelined answers) go to
        a fresh parser for the next answer."""
        buffered, closed = self.parser.trailing_data
        have = min(length, len(buffered))
        if have == length:
            body = buffered[:length]
        else:
            buffer = self.body_buffer
            if len(buffer) < length:
                buffer = bytearray(length)
                if length <= _KEPT_BUFFER:  # kept for the connection's next answers: no allocation per answer
                    self.body_buffer = buffer
            view = memoryview(buffer)
            view[:have] = buffered[:have]
            while have < length:
                n = self._recv_into(view[have:length], deadline)
                if not n:
                    raise http.client.IncompleteRead(bytes(view[:have]), length - have)
                have += n
            body = bytes(view[:length])
        self.parser = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        if len(buffered) > length:
            self.parser.receive_data(buffered[length:])
        tokens = {t.strip().lower() for t in out.get("connection", "").split(",")}
        close = closed or "close" in tokens or version != b"1.1"
        return status, out, body, close


class FastClient:
    def __init__(self, timeout: float = 10.0, ssl_context: ssl.SSLContext | None = None, *,
                 deadline: float = DEFAULT_DEADLINE) -> None:
        """``ssl_context``: how https peers are verified (default: the system's trust store, hostname checked).
        ``timeout``: seconds for the connection and for each read; ``deadline``: seconds for a whole answer."""
        self.timeout, self.deadline = timeout, deadline
        # origins whose addresses are vetted at connect time (netloc -> check(host, port) -> the address to use)
        self.guards: dict[tuple[str, str], Callable[[str, int], tuple[str, int]]] = {}
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
            raise PermanentTransportError(f"unsupported scheme {scheme!r}")
        if scheme == "https" and self._ssl is None:
            self._ssl = ssl.create_default_context()
        guard = self.guards.get((scheme, netloc))
        address = None
        if guard is not None:
            host, _, port = netloc.rpartition(":") if netloc.rsplit(":", 1)[-1].isdigit() else (netloc, "", "")
            address = guard(host.strip("[]"), int(port) if port else (443 if scheme == "https" else 80))
        conn = _Conn(scheme, netloc, timeout, self._ssl, address)
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

    def post(self, url: str, content: bytes, headers: Mapping[str, str] | None = None,
             timeout: float | None = None) -> Response:
        """POST ``content`` to ``url`` (httpx.Client.post's arguments), on this thread's connection to its origin,
        under the same deadline, size limit and address guard as a GET."""
        prepared = self._prepare(url, None, headers, bytes(content))
        answer = self._pipeline([prepared], timeout)[0]
        if isinstance(answer, Exception):
            raise answer
        assert answer is not None
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
        origins = {(p[0], p[1]) for p in prepared}
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
        posts = any(p[5] is not None for p in prepared)  # a POST is never sent twice by the transport
        for attempt in (0, 1):
            reused, answered = False, 0
            try:
                conn, reused = self._conn(scheme, netloc, timeout)
                if reused and posts and conn.stale():
                    self._drop(scheme, netloc)
                    conn, reused = self._conn(scheme, netloc, timeout)
                conn.send([(target, hdrs, body) for _, _, target, _, hdrs, body in prepared[done:]], timeout)
                while done < len(prepared):
                    method = "GET" if prepared[done][5] is None else "POST"
                    status, out, body, close = conn.response(prepared[done][2], time.monotonic() + self.deadline,
                                                             method)
                    results[done] = Response(status, body, out, prepared[done][3])
                    done += 1
                    answered += 1
                    if close:  # the server ends the connection here: the rest were not answered
                        self._drop(scheme, netloc)
                        break
                return results
            except _Deadline as exc:
                error = DeadlineExceeded(f"{exc} ({self.deadline:g} s)")
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
                if reused and attempt == 0 and not posts:
                    continue  # the server closed an idle keep-alive connection: once more on a new one
                error = httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}")
            except _TooLarge as exc:
                error = ResponseTooLarge(f"response refused: {exc}")
            except h11.RemoteProtocolError as exc:
                if exc.error_status_hint == 431:  # the headers outgrew MAX_HEADER_BYTES
                    error = ResponseTooLarge(f"response refused: headers past {MAX_HEADER_BYTES} bytes")
                else:
                    error = httpx.RemoteProtocolError(f"malformed answer: {exc}")
            except PermanentTransportError as exc:
                error = exc
            except (ConnectionRefusedError, socket.gaierror) as exc:
                error = httpx.ConnectError(f"{type(exc).__name__}: {exc}")
            except (OSError, ValueError, http.client.HTTPException) as exc:
                error = httpx.TransportError(f"{type(exc).__name__}: {exc}")
            self._drop(scheme, netloc)
            results[done] = error
            return results
        raise AssertionError("unreachable")

    @staticmethod
    def _prepare(url: str, params: Mapping[str, Any] | None, headers: Mapping[str, str] | None,
                 body: bytes | None = None) -> tuple[str, str, str, str, dict[str, str], bytes | None]:
        """(scheme, netloc, request target, the URL as shown, headers, body) of one GET (body None) or POST."""
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
        return parts.scheme, parts.netloc, target, f"{parts.scheme}://{parts.netloc}{target}", hdrs, body

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()

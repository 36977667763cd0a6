"""One retry policy for every Gonka surface (chain REST, CometBFT RPC, devshard hosts).

Transient (retried with exponential backoff and full jitter): connect/read timeouts and transport errors, 5xx,
429 (``Retry-After`` honoured, capped), and 200 answers whose JSON does not parse (a body cut short by a proxy).
Not retried at the same base URL: an answer past its total deadline (a peer trickling bytes), TLS failures and
non-HTTP schemes (permanent), and any other status (3xx: redirects are never followed; 4xx). Each of those is a
failure of that base URL: a :class:`Fetcher` with several base URLs then asks the next one, as it does when one
exhausts its attempts; only an answer the caller declares expected (``permanent``) ends the request at once. Every
answer is reported to ``on_response`` (the poller archives them): a usable one whole, any other cut to
:data:`REJECTED_BODY_BYTES` (enough to diagnose it). Every failed attempt goes to ``on_failure``.
"""
from __future__ import annotations

import base64
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
import orjson

from indexer.sources.gonka.fastclient import DeadlineExceeded, PermanentTransportError

REJECTED_BODY_BYTES = 4096  # what is archived of an answer that was not used


class FetchError(Exception):
    """A request that did not yield usable JSON. ``transient`` tells whether trying later may help."""

    def __init__(self, url: str, message: str, *, status: int | None = None, transient: bool = True,
                 expected: bool = False, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{message} ({url})")
        self.url, self.status, self.transient = url, status, transient
        self.expected = expected  # an answer the caller declared it handles (``permanent``): no failover
        self.headers = headers or {}  # the response headers of an error answer (X-Devshard-Error, say)


@dataclass
class RetryPolicy:
    attempts: int = 6                   # per base URL
    timeout: float = 10.0               # seconds, connect and each read
    deadline: float = 60.0              # seconds one answer may take in all (a peer trickling bytes)
    backoff_base: float = 0.2
    backoff_max: float = 10.0
    retry_after_max: float = 60.0       # never sleep longer than this for one Retry-After
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep

    def backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max, base·2^attempt)]."""
        return self.rng.uniform(0, min(self.backoff_max, self.backoff_base * (2 ** attempt)))


def retry_after_seconds(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _loads(body: bytes) -> Any:
    """orjson (several times faster on diff pages); what it refuses (integers beyond 64 bits) goes to json."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


def split_credentials(url: str) -> tuple[str, str | None]:
    """(the URL without userinfo, an HTTP Basic ``Authorization`` value or None). ``https://user:pass@node/`` is
    sent as basic auth, and only the bare URL is ever logged, archived (net.*) or shown in an error."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return urlunsplit(parts._replace(netloc=hostport)), f"Basic {token}"


def redact_url(url: str) -> str:
    """The URL with any userinfo replaced by ***, for messages about URLs that were not split yet."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def _shown(body: bytes, limit: int) -> str:
    """The start of a peer's body for an error message: bounded, one line, control characters escaped."""
    text = body[:limit].decode("utf-8", "replace").strip()
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


ResponseHook = Callable[[str, int, bytes, Mapping[str, str]], None]
FailureHook = Callable[[str, str, bool], None]
ErrorBody = Callable[[Any], "str | None"]  # a 200 answer's JSON → why it is an error answer, or None


class Fetcher:
    """GET JSON from one of ``base_urls`` (failover in order, the last good one is tried first next time). One
    Fetcher serves several threads: ``base_urls`` is reordered only under its lock (:meth:`prefer`, :meth:`demote`),
    and read as a copy (:meth:`urls`)."""

    def __init__(self, base_urls: str | Sequence[str], *, policy: RetryPolicy | None = None,
                 client: httpx.Client | None = None, on_response: ResponseHook | None = None,
                 on_failure: FailureHook | None = None, name: str = "http") -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("no base URL")
        self._order = threading.Lock()  # guards the order of base_urls
        self._auth: dict[str, str] = {}  # bare base URL -> Authorization value, for URLs that carried userinfo
        self.base_urls = []
        for u in urls:
            bare, auth = split_credentials(u.rstrip("/"))
            self.base_urls.append(bare)
            if auth is not None:
                self._auth[bare] = auth
        self.policy = policy or RetryPolicy()
        self._own_client = client is None
        self.client = client or httpx.Client(timeout=self.policy.timeout)
        self.on_response, self.on_failure, self.name = on_response, on_failure, name
        # set by a client whose peers may answer an error with status 200 (ChainRest: a gRPC-gateway error body):
        # such an answer is failed like a 5xx (retried, then the next base URL), never handed over as data
        self.error_body: ErrorBody | None = None
        self.requests = 0
        self.overran = False  # an answer outran its deadline (a peer trickling bytes), or every attempt of a
                              # request timed out (a peer that never answers): see Gonka.host

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def urls(self) -> list[str]:
        """The base URLs in the order they are asked now (a copy)."""
        with self._order:
            return list(self.base_urls)

    def prefer(self, base: str) -> None:
        """Ask ``base`` first from now on (it answered)."""
        with self._order:
            if base in self.base_urls and self.base_urls[0] != base:
                self.base_urls.remove(base)
                self.base_urls.insert(0, base)

    def demote(self, base: str) -> None:
        """Ask ``base`` last from now on (it lied, or lacks what was asked)."""
        with self._order:
            if base in self.base_urls and len(self.base_urls) > 1:
                self.base_urls.remove(base)
                self.base_urls.append(base)

    def distrust(self, base: str, err: FetchError) -> None:
        """``base`` answered something that cannot be what was asked (a lie, another height): recorded in the
        failure log and asked last from now on."""
        self.report(err)
        self.demote(base)

    def get_json(self, path: str, params: Mapping[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None) -> Any:
        return self.get_json_meta(path, params, headers)[0]

    def get_json_many(self, path: str, params: Sequence[Mapping[str, Any] | None],
                      headers: Sequence[Mapping[str, str] | None],
                      permanent: Callable[[int, bytes], bool] | None = None) -> list[Any]:
        """:meth:`get_json` of ``path`` with each of ``params`` / ``headers``: one entry per request, its JSON or
        the :class:`FetchError` it ended with (returned, not raised). With a client that pipelines (FastClient's
        ``get_many``), the first attempts go to the first base URL at once, back to back on one connection; every
        answer then takes the path of a single request's first attempt (retries, backoff, failover, hooks), and a
        request the connection closed on before answering is sent again. Other clients: one request at a time."""
        many = getattr(self.client, "get_many", None)
        firsts: list[Any] = [None] * len(params)
        base = self.urls()[0]
        if many is not None and len(params) > 1:
            firsts = many([(base + path, p, self._authorized(base, h)) for p, h in zip(params, headers)],
                          self.policy.timeout)
            self.requests += sum(1 for f in firsts if f is not None)  # the unanswered are counted when sent again
        out: list[Any] = []
        for p, h, first in zip(params, headers, firsts):
            if self.overran:  # the peer let a request run out of time: the rest are not sent one by one, each
                # with its own attempts (a batch of N would cost N deadlines)
                out.append(FetchError(base + path, "not asked: this peer let a request run out of time this cycle "
                                      "(an answer past its deadline, or every attempt timed out)", transient=True))
                continue
            try:
                out.append(self.get_json_meta(path, p, h, permanent,
                                              first=None if first is None else (base, first))[0])
            except FetchError as exc:
                out.append(exc)
        return out

    def post_json(self, path: str, body: bytes, headers: Mapping[str, str] | None = None, *,
                  permanent: Callable[[int, bytes], bool] | None = None, archive: bool = True,
                  once: bool = False) -> Any:
        """POST ``body`` to ``path`` and read a JSON answer, with the retry policy and failover of a GET (the
        Connect unary calls of :mod:`indexer.sources.gonka.rpcpayloads`). ``once``: one attempt per base URL, for
        a body the server must never see twice (an Attach's nonce; the caller builds a new body to try again).
        ``archive=False``: the answer is not reported to ``on_response`` (it holds a session credential)."""
        data, _, _ = self._request(path, None, headers, permanent, body=body, archive=archive,
                                   attempts=1 if once else None)
        return data

    def get_json_meta(self, path: str, params: Mapping[str, Any] | None = None,
                      headers: Mapping[str, str] | None = None,
                      permanent: Callable[[int, bytes], bool] | None = None,
                      first: Any = None, body: bytes | None = None,
                      archive: bool = True) -> tuple[Any, Mapping[str, str]]:
        """(JSON, response headers). ``permanent(status, body)``: an error answer it accepts is raised at once as
        deterministic (e.g. a node saying a height is pruned: retrying or failing over cannot help), and is not
        reported to ``on_failure`` (the caller expects it and handles it). ``first``: the answer (response or
        transport error) to the first attempt at a base URL, already sent: (base URL, answer) (:meth:`get_json_many`)."""
        data, resp_headers, _ = self._request(path, params, headers, permanent, first, body, archive)
        return data, resp_headers

    def get_json_from(self, path: str, params: Mapping[str, Any] | None = None,
                      headers: Mapping[str, str] | None = None,
                      permanent: Callable[[int, bytes], bool] | None = None) -> tuple[Any, str]:
        """(JSON, the base URL that answered it): :meth:`get_json` for a caller that judges the answer and must
        name the node it came from."""
        data, _, base = self._request(path, params, headers, permanent)
        return data, base

    def get_json_meta_from(self, path: str, params: Mapping[str, Any] | None = None,
                           headers: Mapping[str, str] | None = None) -> tuple[Any, Mapping[str, str], str]:
        """(JSON, response headers, the base URL that answered it): for a caller that judges both the answer's
        headers and its body, and names the node in what it reports."""
        return self._request(path, params, headers)

    def get_json_at(self, base: str, path: str, params: Mapping[str, Any] | None = None,
                    permanent: Callable[[int, bytes], bool] | None = None) -> Any:
        """:meth:`get_json` from ``base`` alone (its retries, no failover): for a caller that walks the nodes
        itself."""
        return self._get_from(base, path, params, None, permanent)[0]

    def get_json_meta_at(self, base: str, path: str, params: Mapping[str, Any] | None = None,
                         headers: Mapping[str, str] | None = None,
                         permanent: Callable[[int, bytes], bool] | None = None) -> tuple[Any, Mapping[str, str]]:
        """:meth:`get_json_meta` from ``base`` alone (its retries, no failover): for a caller that walks the
        nodes itself and judges each answer's headers."""
        return self._get_from(base, path, params, headers, permanent)

    def _request(self, path: str, params, headers, permanent=None, first: Any = None, body: bytes | None = None,
                 archive: bool = True, attempts: int | None = None) -> tuple[Any, Mapping[str, str], str]:
        last: FetchError | None = None
        transient: FetchError | None = None
        for base in self.urls():
            try:
                data, resp_headers = self._get_from(base, path, params, headers, permanent,
                                                    first[1] if first is not None and first[0] == base else None,
                                                    body, archive, attempts)
            except FetchError as exc:
                if exc.expected:
                    raise
                last = exc  # a node that answers wrongly is a failed node: the next one is asked
                if exc.transient:
                    transient = exc
                continue
            self.prefer(base)  # the base URL that answered is asked first next time
            return data, resp_headers, base
        assert last is not None
        raise transient or last  # transient when trying later at some base URL may help

    def _get_from(self, base: str, path: str, params, headers, permanent=None, first: Any = None,
                  body: bytes | None = None, archive: bool = True,
                  attempts: int | None = None) -> tuple[Any, Mapping[str, str]]:
        url = base + path
        keep = self._archive if archive else (lambda *a: None)
        policy = self.policy
        attempts = policy.attempts if attempts is None else attempts
        headers = self._authorized(base, headers)
        last: FetchError | None = None
        timeouts = 0  # attempts that ended with no answer within the read timeout
        for attempt in range(attempts):
            wait = None
            try:
                if attempt == 0 and first is not None:  # sent already, with others (get_json_many)
                    resp = first
                    if isinstance(resp, Exception):
                        raise resp
                else:
                    self.requests += 1
                    if body is None:
                        resp = self.client.get(url, params=params, headers=headers, timeout=policy.timeout)
                    else:
                        resp = self.client.post(url, content=body, headers=headers, timeout=policy.timeout)
            except (DeadlineExceeded, PermanentTransportError, httpx.UnsupportedProtocol) as exc:
                # trying this base URL again cannot help (or would cost another whole deadline): fail over
                err = FetchError(url, f"{type(exc).__name__}: {exc}",
                                 transient=isinstance(exc, DeadlineExceeded))
                self.overran = self.overran or isinstance(exc, DeadlineExceeded)
                self.report(err)
                raise err from None
            except httpx.HTTPError as exc:  # timeouts, refused connections, broken keep-alive
                last = FetchError(url, f"{type(exc).__name__}: {exc}", transient=True)
                timeouts += isinstance(exc, httpx.TimeoutException)
            else:
                shown = str(resp.url)
                if resp.status_code == 200:
                    try:
                        data = _loads(resp.content)
                    except ValueError as exc:
                        keep(shown, resp, False)
                        last = FetchError(shown, f"truncated or invalid JSON: {exc}", status=200, transient=True)
                    else:
                        why = self.error_body(data) if self.error_body is not None else None
                        if why is None:
                            keep(shown, resp, True)
                            return data, resp.headers
                        keep(shown, resp, False)
                        last = FetchError(shown, f"HTTP 200 with an error body: {why}", status=200, transient=True)
                elif permanent is not None and permanent(resp.status_code, resp.content):
                    # an answer the caller expects and handles (a pruned height: live values stand in, flagged in
                    # the data), so not a source failure: no net.failure row; the caller records what it lacks
                    keep(shown, resp, False)
                    raise FetchError(shown, f"HTTP {resp.status_code}: {_shown(resp.content, 300)}",
                                     status=resp.status_code, transient=False, expected=True, headers=resp.headers)
                elif resp.status_code == 429 or resp.status_code >= 500:
                    keep(shown, resp, False)
                    last = FetchError(shown, f"HTTP {resp.status_code}: {_shown(resp.content, 200)}",
                                      status=resp.status_code, transient=True)
                    if resp.status_code == 429:
                        wait = retry_after_seconds(resp.headers.get("Retry-After"))
                else:  # 1xx, other 2xx, 3xx (redirects are not followed), 4xx: the same answer on a retry
                    keep(shown, resp, False)
                    err = FetchError(shown, f"HTTP {resp.status_code}: {_shown(resp.content, 200)}",
                                     status=resp.status_code, transient=False, headers=resp.headers)
                    self.report(err)
                    raise err
            self.report(last)
            if attempt + 1 < attempts:
                policy.sleep(min(policy.retry_after_max, wait) if wait is not None else policy.backoff(attempt))
        assert last is not None
        # a peer that let every attempt time out (it takes connections and never answers) has cost a deadline's
        # worth already: like one that trickled past its deadline, it is not asked again this cycle (Gonka.host)
        self.overran = self.overran or timeouts == attempts
        raise last

    def _authorized(self, base: str, headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """``headers`` plus the HTTP Basic credentials of ``base`` when its URL carried some."""
        if base not in self._auth:
            return headers
        return {**(headers or {}), "Authorization": self._auth[base]}

    def _archive(self, url: str, resp: Any, used: bool) -> None:
        """Report an answer to ``on_response``: whole when it was used, else its first REJECTED_BODY_BYTES."""
        if self.on_response is not None:
            body = resp.content if used else resp.content[:REJECTED_BODY_BYTES]
            self.on_response(url, resp.status_code, body, resp.headers)

    def report(self, err: FetchError) -> None:
        """``err`` to the failure log (``on_failure``), for a failure the caller judged itself."""
        if self.on_failure is not None:
            self.on_failure(err.url, str(err), err.transient)

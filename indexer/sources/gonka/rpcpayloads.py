"""Stored payloads over Connect RPC, for hosts whose HTTP payload route is retired.

The newest host code answers ``GET …/sessions/{id}/payloads`` with ``410`` and ``X-Devshard-Error:
http_session_retired`` (``devshard/transport/httperror.go`` @621c4a3743cc: ``DevshardErrorHTTPSessionRetired``,
body "peer HTTP session route retired; use Connect /sessions/{id}/rpc/") and serves payloads only over Connect
under ``{inference_url}/devshard/{version}/sessions/{id}/rpc`` (``PeerConnConfig.connectBase``,
``devshard/transport/peerconn.go``). The calls, as unary Connect POSTs with ``application/json`` bodies (proto3 JSON:
lowerCamelCase names, bytes in standard base64, 64-bit integers as decimal strings):

1. ``/devshard.transport.v1.PeerAuthService/Attach`` (``rpcpb/auth.pb.go`` @20e349c32d91 ``AttachRequest``;
   checked by ``rpcserver/auth.go`` @190ecef47366): ``peer_address`` (the address the signature recovers to),
   ``attach_nonce`` (16–32 random bytes, never reused), ``protocol_version`` ``"devshard.transport.v1"``, an empty
   ``channel_binding``, ``host_address`` (the host's own participant address), ``timestamp`` (unix seconds, ±30 s
   of the host's clock) and ``signature``: 65 bytes ``r ‖ s ‖ v`` over sha256 of :func:`attach_message`
   (``transport/rpcauth.go`` @0d6609808a35 ``AttachSignatureMessage``, itself a sha256 digest). The answer's
   ``session_token`` (the nonce echoed) goes, hex-encoded, into ``X-Devshard-Session`` on every later call, until
   ``expires_at`` (five minutes by default) or a 401.
2. ``/devshard.transport.v1.PayloadService/GetPayload`` (``rpcpb/payload.pb.go`` @20e349c32d91):
   ``{inference_id, validator_address, timestamp (unix ns), epoch_id, signature}``, the fields and the signed bytes
   of the HTTP route's four headers (:mod:`indexer.sources.gonka.signing`); ``signature`` carries the *base64 text*
   of the 64-byte signature as its bytes, since the host decodes ``string(signature)`` as the ``Authorization``
   value (``transport/rpcclient.go`` @190ecef47366 ``GetPayload``). The answer has the HTTP route's fields.

Bytes and time are bounded as for every peer call (the Fetcher's deadline and FastClient's size limit). Attach
answers are not archived: they carry the session credential.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import struct
import threading
import time
from typing import Any, Callable, Sequence

from indexer.sources.gonka.http import Fetcher, FetchError
from indexer.sources.gonka.signing import Operator, payload_sign_bytes

ATTACH_PROCEDURE = "/devshard.transport.v1.PeerAuthService/Attach"
GET_PAYLOAD_PROCEDURE = "/devshard.transport.v1.PayloadService/GetPayload"
ATTACH_DOMAIN = b"devshard.attach.v1"
ATTACH_PROTOCOL_VERSION = "devshard.transport.v1"
SESSION_HEADER = "X-Devshard-Session"
ERROR_HEADER = "X-Devshard-Error"
HTTP_SESSION_RETIRED = "http_session_retired"
INVALID_SESSION_TOKEN = "invalid_session_token"  # a 401 for the token itself (httperror.go @621c4a3743cc)
NONCE_BYTES = 16
RENEW_BEFORE = 30  # seconds before expires_at a token is replaced (an in-flight call must not outlive it)
CONNECT_HEADERS = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
NOT_SERVED = (404, 405, 415, 501)  # an Attach answered so: no Connect service at that path


class PayloadShapeError(FetchError):
    """A payload response that is not validation.PayloadResponse (or GetPayloadResponse): no payload is taken."""


class RpcNotServed(FetchError):
    """The host retired its HTTP payload route but answers no Connect ``Attach`` either."""


class AttachRefused(FetchError):
    """The host refused an Attach (401, 403, another 4xx). Transient for the payloads behind it: the same payload
    may be served by another member, or by this one on a later cycle; it is not a payload the host lacks."""


def attach_message(host_address: str, timestamp: int, peer_address: str, nonce: bytes,
                   protocol_version: str = ATTACH_PROTOCOL_VERSION, channel_binding: bytes = b"") -> bytes:
    """``AttachSignatureMessage``: sha256 of the domain, then u32-length-prefixed host address, the timestamp as
    u64 big-endian, and the length-prefixed peer address, nonce, protocol version and channel binding."""
    def lp(data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + data
    return hashlib.sha256(ATTACH_DOMAIN + lp(host_address.encode()) + struct.pack(">Q", timestamp % 2**64)
                          + lp(peer_address.encode()) + lp(nonce) + lp(protocol_version.encode())
                          + lp(channel_binding)).digest()


def rpc_base(version: str, escrow_id: str) -> str:
    return f"/devshard/{version}/sessions/{escrow_id}/rpc"


def payload_from_rpc(data: Any) -> str | None:
    """The response payload text of a ``GetPayloadResponse`` (None when the host stored none: proto3 JSON leaves
    empty bytes out). Raises ValueError for another shape, so that a wrong text is never stored."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object (GetPayloadResponse)")
    encoded = data.get("responsePayload", data.get("response_payload"))
    if encoded is None or encoded == "":
        return None
    if not isinstance(encoded, str):
        raise ValueError(f"responsePayload is a JSON {type(encoded).__name__}, expected base64 text")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("responsePayload is not standard base64") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the stored response payload is not UTF-8 text (byte {exc.start})") from None


def _token_refused(status: int, body: bytes) -> bool:
    """A 401 about the session token (expired, replaced, unknown) rather than the request: attach again."""
    return status == 401 and b"session token" in body.lower()


class ConnectPayloads:
    """One host's Connect session for payloads: Attach when there is no live token (per protocol version: each
    version is its own child process on the host), GetPayload with it, one re-Attach on a 401."""

    def __init__(self, http: Fetcher, host_address: str, operator: Operator, *,
                 clock: Callable[[], float] = time.time, nonce: Callable[[int], bytes] = os.urandom) -> None:
        self.http, self.host_address, self.operator = http, host_address, operator
        self.clock, self.nonce = clock, nonce
        self._tokens: dict[str, tuple[str, float]] = {}  # version -> (hex token, expires at)
        self._lock = threading.Lock()  # payload batches of one host run on several threads
        self.attaches = 0

    def attach(self, version: str, escrow_id: str) -> str:
        """A fresh session token (hex) through ``escrow_id``'s door; raises FetchError (:class:`RpcNotServed` when
        the host has no Connect service there, :class:`AttachRefused` when it refuses). Each attempt is a new body
        with a new nonce, sent once: a host that took an Attach whose answer was lost refuses its nonce again
        (``attach_nonce already in use``), so a body is never resent."""
        policy = self.http.policy
        path = rpc_base(version, escrow_id) + ATTACH_PROCEDURE
        op = self.operator
        for attempt in range(policy.attempts):
            now = int(self.clock())
            try:
                data = self.http.post_json(path, self._attach_body(now), CONNECT_HEADERS, archive=False, once=True,
                                           permanent=lambda status, _: status in NOT_SERVED)
                break
            except FetchError as exc:
                if exc.status in NOT_SERVED:
                    raise RpcNotServed(exc.url, f"no Connect PeerAuthService.Attach (HTTP {exc.status})",
                                       status=exc.status, transient=False) from None
                said = str(exc).removesuffix(f" ({exc.url})")
                if not exc.transient:
                    raise AttachRefused(exc.url, f"Connect Attach as {op.peer_address} refused: {said}",
                                        status=exc.status, transient=True) from None
                if attempt + 1 == policy.attempts:
                    raise FetchError(exc.url, f"Connect Attach as {op.peer_address} failed: {said}",
                                     status=exc.status, transient=True) from None
                policy.sleep(policy.backoff(attempt))
        self.attaches += 1
        token = data.get("sessionToken", data.get("session_token")) if isinstance(data, dict) else None
        try:
            raw = base64.b64decode(token or "", validate=True)
            expires = int((data.get("expiresAt", data.get("expires_at")) or now + 60))
        except (binascii.Error, ValueError, TypeError):
            raw, expires = b"", 0
        if not raw:
            raise FetchError(self.http.base_urls[0] + path, "Attach answer without a session token",
                             status=200, transient=False)
        hex_token = raw.hex()
        self._tokens[version] = (hex_token, float(expires))
        return hex_token

    def _attach_body(self, now: int) -> bytes:
        """A signed AttachRequest at unix time ``now``, with a new nonce."""
        nonce = self.nonce(NONCE_BYTES)
        op = self.operator
        message = attach_message(self.host_address, now, op.peer_address, nonce)
        return json.dumps({"peerAddress": op.peer_address, "attachNonce": base64.b64encode(nonce).decode(),
                           "protocolVersion": ATTACH_PROTOCOL_VERSION, "hostAddress": self.host_address,
                           "timestamp": str(now),
                           "signature": base64.b64encode(op.sign_recoverable(message)).decode()}).encode()

    def _token(self, version: str, escrow_id: str, stale: str | None = None) -> str:
        with self._lock:
            held = self._tokens.get(version)
            if held is not None and held[0] != stale and self.clock() < held[1] - RENEW_BEFORE:
                return held[0]
            return self.attach(version, escrow_id)

    def payload(self, version: str, escrow_id: str, inference_id: int, epoch: int) -> str | None:
        """The stored response payload of one inference (None: none stored); raises FetchError."""
        path = rpc_base(version, escrow_id) + GET_PAYLOAD_PROCEDURE
        token = self._token(version, escrow_id)
        for attempt in (0, 1):
            body = self._request(inference_id, epoch)
            try:
                data = self.http.post_json(path, body, {**CONNECT_HEADERS, SESSION_HEADER: token},
                                           permanent=lambda status, said: attempt == 0 and _token_refused(status, said))
            except FetchError as exc:
                if attempt == 0 and exc.status == 401 and (exc.headers.get(ERROR_HEADER) == INVALID_SESSION_TOKEN
                                                           or _token_refused(401, str(exc).encode())):
                    token = self._token(version, escrow_id, stale=token)  # expired or replaced: attach once more
                    continue
                raise
            try:
                return payload_from_rpc(data)
            except ValueError as exc:
                raise PayloadShapeError(f"{self.http.base_urls[0]}{path} inference_id={inference_id}",
                                        f"GetPayload answer: {exc}", status=200, transient=False) from None
        raise AssertionError("unreachable")

    def _request(self, inference_id: int, epoch: int) -> bytes:
        op = self.operator
        ts = time.time_ns()
        text = op.sign(payload_sign_bytes(str(inference_id), int(epoch), ts, op.address))
        return json.dumps({"inferenceId": str(inference_id), "validatorAddress": op.address, "timestamp": str(ts),
                           "epochId": str(int(epoch)),
                           "signature": base64.b64encode(text.encode("ascii")).decode()}).encode()

    def payloads(self, version: str, escrow_id: str, inference_ids: Sequence[int],
                 epoch: int) -> list[str | None | FetchError]:
        """:meth:`payload` of each id, one call after the other: each entry its payload, None, or its FetchError."""
        out: list[str | None | FetchError] = []
        for iid in inference_ids:
            try:
                out.append(self.payload(version, escrow_id, iid, epoch))
            except FetchError as exc:
                out.append(exc)
                if isinstance(exc, (RpcNotServed, AttachRefused)):
                    # the door is shut for this escrow: the others would be refused alike
                    out.extend(exc for _ in inference_ids[len(out):])
                    break
        return out

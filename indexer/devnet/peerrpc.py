"""The Connect RPC payload service of "new" devnet hosts: ``PeerAuthService.Attach`` and ``PayloadService.GetPayload``
under ``/devshard/{version}/sessions/{id}/rpc``, with the signatures checked for real.

Written from the upstream Go source, apart from the indexer's client (nothing of :mod:`indexer.sources` is imported
here: a mistake in the client's preimages must not be mirrored by the server it is tested against):

* ``rpcserver/auth.go`` @190ecef47366 ``attach``: peer address required, a 16–32-byte attach nonce never reused,
  an empty channel binding, ``host_address`` equal to the host's own, protocol version ``devshard.transport.v1``,
  the timestamp within ±30 s (``MaxTimestampDrift``, ``transport/auth.go``), then the signer recovered from the
  65-byte signature over sha256 of ``AttachSignatureMessage`` (``transport/rpcauth.go`` @0d6609808a35) must be the
  peer address, and the peer a participant of the URL's escrow (the door). The token is the nonce, valid
  ``session_seconds`` (five minutes upstream), sent back hex-encoded in ``X-Devshard-Session``;
* ``rpcserver/payload.go`` @1924b248f808 ``GetPayload``: a live token, its peer a member of the escrow's group, then
  the HTTP route's checks on the request's own fields (``validator_address``, ``timestamp`` in unix ns within 60 s
  old / 10 s ahead, ``epoch_id``, and ``signature``, the base64 *text* of a 64-byte low-s ECDSA signature over
  sha256 of ``getDevBytes``: ``inference_id ‖ epoch (when > 0) ‖ timestamp (when > 0) ‖ validator_address``).

Devnet addresses are names, not hashes of keys: the address a recovered key stands for is looked up in the devnet's
key table (:meth:`DevnetAccounts.address_of_key`), where the chain would hash it. Errors are Connect's unary error
bodies ``{"code", "message"}`` with the HTTP status of the code.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import struct
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from coincurve import PublicKey

from indexer.devnet.operators import DevnetAccounts, member_for, verify_cosmos_secp256k1

DRIFT_SECONDS = 30
PAYLOAD_MAX_AGE_NS = 60 * 10**9
PAYLOAD_MAX_AHEAD_NS = 10 * 10**9
STATUS = {"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403, "not_found": 404,
          "unimplemented": 501, "internal": 500}
RETIRED_MESSAGE = "peer HTTP session route retired; use Connect /sessions/{id}/rpc/"


class ConnectError(Exception):
    def __init__(self, code: str, message: str, devshard_error: str | None = None) -> None:
        super().__init__(message)
        self.code, self.devshard_error = code, devshard_error

    def answer(self) -> tuple[int, bytes, dict[str, str]]:
        headers = {"Content-Type": "application/json"}
        if self.devshard_error:
            headers["X-Devshard-Error"] = self.devshard_error
        return STATUS[self.code], json.dumps({"code": self.code, "message": str(self)}).encode(), headers


def _attach_preimage_digest(host: str, ts: int, peer: str, nonce: bytes, version: str, binding: bytes) -> bytes:
    parts = [b"devshard.attach.v1"]
    for i, field in enumerate((host.encode(), ts, peer.encode(), nonce, version.encode(), binding)):
        if i == 1:
            parts.append((field % (1 << 64)).to_bytes(8, "big"))  # unix seconds, u64 big-endian, no length prefix
        else:
            parts.append(struct.pack(">I", len(field)) + field)
    return hashlib.sha256(b"".join(parts)).digest()


def _payload_preimage(inference_id: str, epoch: int, timestamp: int, address: str) -> bytes:
    text = inference_id + (str(epoch) if epoch > 0 else "") + (str(timestamp) if timestamp > 0 else "")
    return (text + address).encode("utf-8")


def _b64(value: Any, name: str) -> bytes:
    if value in (None, ""):
        return b""
    if not isinstance(value, str):
        raise ConnectError("invalid_argument", f"{name}: expected base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ConnectError("invalid_argument", f"{name}: not base64") from None


def _int(value: Any, name: str, *, signed: bool = True) -> int:
    if value in (None, ""):
        return 0
    try:
        out = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    except ValueError:
        out = None
    if out is None or (not signed and out < 0):
        raise ConnectError("invalid_argument", f"{name}: not an integer")
    return out


def _field(msg: Mapping[str, Any], camel: str, snake: str) -> Any:
    return msg.get(camel, msg.get(snake))  # protojson accepts the JSON name and the proto name


class PeerRpc:
    """Attach sessions of the devnet's new hosts, and the two handlers."""

    def __init__(self, accounts: DevnetAccounts, session_seconds: float = 300.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.accounts, self.session_seconds, self.clock = accounts, session_seconds, clock
        self.sessions: dict[bytes, tuple[str, str, float]] = {}  # token -> (host, peer, expires at)
        self.used_nonces: set[bytes] = set()
        self.lock = threading.Lock()
        self.attached = 0

    @staticmethod
    def _message(body: bytes) -> Mapping[str, Any]:
        try:
            msg = json.loads(body or b"{}")
        except ValueError:
            raise ConnectError("invalid_argument", "request body is not JSON") from None
        if not isinstance(msg, dict):
            raise ConnectError("invalid_argument", "request body is not a JSON object")
        return msg

    def attach(self, host: str, group: Sequence[str], body: bytes) -> dict[str, Any]:
        msg = self._message(body)
        peer = _field(msg, "peerAddress", "peer_address") or ""
        nonce = _b64(_field(msg, "attachNonce", "attach_nonce"), "attach_nonce")
        binding = _b64(_field(msg, "channelBinding", "channel_binding"), "channel_binding")
        host_address = _field(msg, "hostAddress", "host_address") or ""
        version = _field(msg, "protocolVersion", "protocol_version") or ""
        ts = _int(msg.get("timestamp"), "timestamp")
        signature = _b64(msg.get("signature"), "signature")
        if not peer:
            raise ConnectError("invalid_argument", "peer_address is required")
        if not 16 <= len(nonce) <= 32:
            raise ConnectError("invalid_argument", "attach_nonce must be 16–32 bytes")
        if binding:
            raise ConnectError("invalid_argument", "channel_binding must be empty: HTTP/1.1 has no TLS layer")
        if not host_address:
            raise ConnectError("invalid_argument", "host_address is required")
        if host_address != host:
            raise ConnectError("unauthenticated", "host_address does not match")
        if version != "devshard.transport.v1":
            raise ConnectError("invalid_argument", "unsupported protocol_version" if version else
                               "protocol_version is required")
        now = int(self.clock())
        if abs(ts - now) > DRIFT_SECONDS:
            raise ConnectError("unauthenticated", f"timestamp drift {abs(ts - now)}s exceeds maximum {DRIFT_SECONDS}s")
        if len(signature) != 65:
            raise ConnectError("unauthenticated", f"recover address: invalid signature length: {len(signature)}")
        digest = _attach_preimage_digest(host_address, ts, peer, nonce, version, binding)
        try:
            key = PublicKey.from_signature_and_message(signature, digest, hasher=lambda m: hashlib.sha256(m).digest())
        except (ValueError, TypeError) as exc:
            raise ConnectError("unauthenticated", f"recover address: ecrecover failed: {exc}") from None
        recovered = self.accounts.address_of_key(key.format(compressed=True))
        if recovered != peer:
            raise ConnectError("unauthenticated", f"recovered address {recovered or 'unknown'} does not match "
                               "peer_address")
        if member_for(peer, group, self.accounts) is None:
            raise ConnectError("permission_denied", "peer is not a known participant")
        with self.lock:
            if nonce in self.used_nonces:
                raise ConnectError("permission_denied", "attach_nonce already in use")
            self.used_nonces.add(nonce)
            expires = self.clock() + self.session_seconds
            self.sessions[nonce] = (host, peer, expires)
            self.attached += 1
        return {"sessionToken": base64.b64encode(nonce).decode(), "expiresAt": str(int(expires)),
                "limits": {"messagesPerMin": 600, "maxStreams": 16, "attachPerMin": 60}}

    def peer_of(self, host: str, headers: Mapping[str, str]) -> str:
        """The peer of the request's live session (the interceptor in front of every RPC but Attach)."""
        token_hex = next((v for k, v in headers.items() if k.lower() == "x-devshard-session"), "")
        if not token_hex:
            raise ConnectError("unauthenticated", "missing X-Devshard-Session")
        try:
            token = bytes.fromhex(token_hex)
        except ValueError:
            token = b""
        with self.lock:
            held = self.sessions.get(token)
        if held is None or held[0] != host or self.clock() > held[2]:
            raise ConnectError("unauthenticated", "invalid or expired session token", "invalid_session_token")
        return held[1]

    def get_payload(self, host: str, group: Sequence[str], headers: Mapping[str, str], body: bytes,
                    stored: Callable[[int], dict[str, Any] | None]) -> dict[str, Any]:
        peer = self.peer_of(host, headers)
        if member_for(peer, group, self.accounts) is None:
            raise ConnectError("permission_denied", "peer is not a group member")
        msg = self._message(body)
        iid = _field(msg, "inferenceId", "inference_id") or ""
        address = _field(msg, "validatorAddress", "validator_address") or ""
        ts = _int(msg.get("timestamp"), "timestamp")
        epoch = _int(_field(msg, "epochId", "epoch_id"), "epoch_id", signed=False)
        signature_text = _b64(msg.get("signature"), "signature")
        if not iid:
            raise ConnectError("invalid_argument", "inference_id required")
        if not address:
            raise ConnectError("invalid_argument", "validator_address required")
        if not signature_text:
            raise ConnectError("unauthenticated", "signature required")
        age = time.time_ns() - ts
        if age > PAYLOAD_MAX_AGE_NS:
            raise ConnectError("invalid_argument", "request timestamp too old")
        if age < -PAYLOAD_MAX_AHEAD_NS:
            raise ConnectError("invalid_argument", "request timestamp in the future")
        granter = member_for(address, group, self.accounts)
        if granter is None:
            raise ConnectError("unauthenticated", "not a group member")
        try:
            signature = base64.b64decode(signature_text.decode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise ConnectError("unauthenticated", "invalid signature") from None
        preimage = _payload_preimage(iid, epoch, ts, address)
        if not any(verify_cosmos_secp256k1(k, preimage, signature) for k in self.accounts.keys_of(granter)):
            raise ConnectError("unauthenticated", "invalid signature")
        if not iid.isdigit() or (found := stored(int(iid))) is None:
            raise ConnectError("not_found", "payload not found")
        out = {"inferenceId": found.get("inference_id"), "promptPayload": found.get("prompt_payload"),
               "responsePayload": found.get("response_payload"),
               "executorSignature": found.get("executor_signature")}
        return {k: v for k, v in out.items() if v not in (None, "")}  # proto3 JSON leaves empty fields out

"""Operator mode: sign devshard payload requests exactly as hosts check them.

A devshard host serves ``GET /devshard/{v}/sessions/{id}/payloads?inference_id=N`` only to members of the escrow's
group (``HostManager.authenticatePayloadRequest``, gonka-ai/gonka ``devshard/cmd/devshardd/session/manager.go`` at
df69efb70ade57781349bc8eabc0de0662413c00). An indexer run by a participant ("operator") can sign these requests
with its own key and read the stored refusal bodies of the escrows its address is a member of.

What the host checks, in order (status and message of each refusal in :data:`REFUSALS`):

1. headers ``X-Validator-Address``, ``X-Timestamp``, ``X-Epoch-Id`` present (400), ``Authorization`` present (401);
2. ``X-Timestamp`` a decimal int64 of **unix nanoseconds**, ``X-Epoch-Id`` a decimal uint64 (400);
3. ``now − timestamp ≤ 60 s`` and ``timestamp − now ≤ 10 s`` by the host's wall clock (400);
4. ``X-Validator-Address`` is a slot address of the escrow's group, or a warm key (authz grantee) of one (401);
5. the signature verifies under one of the member's keys: its account public key (``AccountByAddress``) or the
   keys of its grantees for ``/inference.inference.MsgStartInference`` (401 otherwise).

The signed bytes are ``calculations.getDevBytes`` in its version with the ``EpochId`` field
(``inference-chain/x/inference/calculations/signature_validate.go`` as in the fork zpoken/gonka at
89ff8bdb32bca19688cd505bef749a468b281bf4, the only indexed copy that has the field: gonka-ai/gonka at 5b1abfe90db7
and 2566be19c155 predate it; the host fills ``SignatureComponents{Payload, EpochId, Timestamp, TransferAddress}`` in
``authenticatePayloadRequest``) for ``Payload = inference_id`` (the query string value as sent), ``EpochId =
X-Epoch-Id``, ``Timestamp = X-Timestamp``, ``TransferAddress = X-Validator-Address``: the plain concatenation
``inference_id ‖ epoch ‖ timestamp ‖ address`` of decimal strings, no separators, where the epoch is left out when
it is 0 and the timestamp when it is ≤ 0. The same bytes, signature and base64 text travel in the Connect
``PayloadService.GetPayload`` request of newer hosts (:mod:`indexer.sources.gonka.rpcpayloads`). The verifier is Cosmos
SDK ``secp256k1.PubKey.VerifySignature``: ECDSA over secp256k1 of **sha256(bytes)**, signature exactly 64 bytes
``r ‖ s`` (big-endian, not DER) with low ``s`` (``s ≤ n/2``; high-s is refused as malleable). ``Authorization``
carries it base64-encoded (standard alphabet, padded), with no scheme prefix: the validators' own client
(``common/validation`` ``FetchPayloadsHTTP``) sets the header to the bare signature, as the keyring's
``AccountSigner.SignBytes`` returns it.

The epoch is not compared with the escrow's: it only enters the signed bytes (a signature made for another epoch
fails as ``invalid signature``) and picks the payload store partition, with fallbacks to adjacent epochs and to the
escrow's own epoch. The signed bytes name neither the escrow nor the host, so a signature could be replayed by the
receiving host to another member host for the same inference id within the 60 s window: operator mode signs only
for escrows whose group holds the operator.

Key file: the account's (or warm key's) secp256k1 private key as 64 hex digits, the output of
``inferenced keys export <name> --unarmored-hex --unsafe`` (an optional ``0x`` and surrounding whitespace are
accepted). The file must not be accessible by group or others (``chmod 600``). Armored keyring exports are
passphrase-encrypted and are refused with a hint. The key never appears in logs, errors or reprs.
"""
from __future__ import annotations

import base64
import hashlib
import os
import stat
import time
from pathlib import Path
from typing import Collection, Mapping

from coincurve import PrivateKey

from indexer.settings import ConfigError
from indexer.verify.signatures import address_of_pubkey

# header names as the host reads them (common/utils: XValidatorAddressHeader, XTimestampHeader, XEpochIdHeader,
# AuthorizationHeader)
HEADER_ADDRESS = "X-Validator-Address"
HEADER_TIMESTAMP = "X-Timestamp"
HEADER_EPOCH = "X-Epoch-Id"
HEADER_AUTHORIZATION = "Authorization"

MAX_AGE_NS = 60 * 1_000_000_000     # authenticatePayloadRequest: maxAge
MAX_FUTURE_NS = 10 * 1_000_000_000  # authenticatePayloadRequest: maxFuture

# (status, message) of each refusal of authenticatePayloadRequest / HandlePayloads; echo.NewHTTPError bodies are
# rendered by echo's default error handler as {"message": …} (inferred: no custom handler was found)
REFUSALS: dict[str, tuple[int, str]] = {
    "missing_inference_id": (400, "inference_id required"),
    "missing_address": (400, "X-Validator-Address header required"),
    "missing_timestamp": (400, "X-Timestamp header required"),
    "missing_epoch": (400, "X-Epoch-Id header required"),
    "missing_signature": (401, "Authorization header required"),
    "invalid_timestamp": (400, "invalid timestamp format"),
    "invalid_epoch": (400, "invalid epoch_id format"),
    "timestamp_too_old": (400, "request timestamp too old"),
    "timestamp_in_future": (400, "request timestamp in the future"),
    "not_group_member": (401, "not a group member"),
    "pubkey_resolution": (401, "failed to resolve validator pubkeys"),
    "invalid_signature": (401, "invalid signature"),
    "payload_not_found": (404, "payload not found"),
}

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141

ENV_ADDRESS = "GONKA_OPERATOR_ADDRESS"
ENV_KEY_FILE = "GONKA_OPERATOR_KEY_FILE"
ENV_MEMBER = "GONKA_OPERATOR_MEMBER"


class OperatorConfigError(ConfigError):
    """Operator mode is misconfigured (missing setting, unreadable or unsafe key file). Never contains the key."""


def payload_sign_bytes(inference_id: str, epoch_id: int, timestamp_ns: int, address: str) -> bytes:
    """``getDevBytes``: ``inference_id ‖ epoch (if > 0) ‖ timestamp (if > 0) ‖ address``, decimal, no separators."""
    out = str(inference_id)
    if epoch_id > 0:
        out += str(int(epoch_id))
    if timestamp_ns > 0:
        out += str(int(timestamp_ns))
    return (out + address).encode("utf-8")


def parse_private_key(text: str, source: str) -> bytes:
    """32 key bytes from the hex form of ``inferenced keys export --unarmored-hex``. ``source`` names the file in
    errors; the text itself is never quoted."""
    s = text.strip()
    if "BEGIN" in s and "PRIVATE KEY" in s:
        raise OperatorConfigError(f"{source}: an armored (passphrase-encrypted) keyring export; write the key as hex "
                                  "with `inferenced keys export <name> --unarmored-hex --unsafe` instead")
    if s[:2] in ("0x", "0X"):
        s = s[2:]
    if len(s) != 64 or any(c not in "0123456789abcdefABCDEF" for c in s):
        raise OperatorConfigError(f"{source}: expected a secp256k1 private key as 64 hex digits "
                                  f"(found {len(s)} characters that are not one)")
    secret = bytes.fromhex(s)
    if not 0 < int.from_bytes(secret, "big") < SECP256K1_N:
        raise OperatorConfigError(f"{source}: not a valid secp256k1 private key (out of range)")
    return secret


def read_key_file(path: str | os.PathLike) -> bytes:
    """The private key in ``path``, refused if the file is not a regular file private to its owner."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise OperatorConfigError(f"operator key file {p}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise OperatorConfigError(f"operator key file {p}: not a regular file")
    if st.st_mode & 0o077:
        raise OperatorConfigError(f"operator key file {p} is accessible by group or others "
                                  f"(mode {stat.S_IMODE(st.st_mode):04o}); run `chmod 600 {p}`")
    try:
        text = p.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not ASCII text"
        raise OperatorConfigError(f"operator key file {p}: {reason}") from None
    return parse_private_key(text, f"operator key file {p}")


def write_key_file(path: str | os.PathLike, secret: bytes) -> Path:
    """Write ``secret`` as the hex key file operator mode reads (mode 0600; an existing file is not replaced)."""
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secret.hex() + "\n")
    return p


class Operator:
    """The identity payload requests are signed with.

    ``address`` goes into ``X-Validator-Address`` and the signed bytes; ``member`` is the group member it acts for
    (itself, or the granter when ``address`` is a warm key) and decides which escrows are signed for.

    ``peer_address`` is the address the key itself is known by on chain (the account it is the key of, or the
    grantee it is): what a Connect ``Attach`` names as its signer, since the host recovers the signer from the
    signature. It is ``address`` until :func:`indexer.sources.gonka.identity.check_operator_key` finds otherwise.
    """

    __slots__ = ("address", "member", "peer_address", "_key")

    def __init__(self, address: str, secret: bytes, member: str | None = None) -> None:
        if not address:
            raise OperatorConfigError("operator address is empty")
        self.address, self.member = address, member or address
        self.peer_address = address
        self._key = PrivateKey(bytes(secret))

    def __repr__(self) -> str:
        return f"Operator(address={self.address!r}, member={self.member!r}, key=<redacted>)"

    __str__ = __repr__

    def __reduce__(self):  # keep the key out of pickles (process pools, caches)
        raise TypeError("an Operator holds a private key and is not pickled")

    @property
    def public_key(self) -> bytes:
        """Compressed (33-byte) public key, as the chain stores account keys (base64 in ``AccountByAddress``)."""
        return self._key.public_key.format(compressed=True)

    def sign(self, message: bytes) -> str:
        """Base64 of the 64-byte ``r ‖ s`` ECDSA signature of sha256(message); deterministic (RFC 6979) and low-s
        (libsecp256k1 always normalizes), as Cosmos ``PrivKey.Sign`` produces."""
        compact = self._key.sign_recoverable(message, hasher=lambda m: hashlib.sha256(m).digest())[:64]
        return base64.b64encode(compact).decode("ascii")

    @property
    def key_address(self) -> str:
        """The bech32 ``gonka`` address of the key (ripemd160 of sha256 of the compressed public key)."""
        return address_of_pubkey(self.public_key)

    def sign_recoverable(self, message: bytes) -> bytes:
        """go-ethereum ``crypto.Sign`` of sha256(message), as devshard's ``Secp256k1Signer.Sign`` makes it
        (``devshard/signing/secp256k1.go`` @1924b248f808): 65 bytes ``r ‖ s ‖ v`` with v in {0, 1}, low s."""
        return self._key.sign_recoverable(message, hasher=lambda m: hashlib.sha256(m).digest())

    def signs_for(self, members: Collection[str] | None) -> bool:
        """Whether an escrow with these slot addresses should get signed requests (unknown group: no)."""
        return members is not None and self.member in members

    def payload_headers(self, inference_id: int | str, epoch_id: int, now_ns: int | None = None) -> dict[str, str]:
        """The four headers of one payload request, signed now (or at ``now_ns``)."""
        ts = time.time_ns() if now_ns is None else int(now_ns)
        sig = self.sign(payload_sign_bytes(str(inference_id), int(epoch_id), ts, self.address))
        return {HEADER_ADDRESS: self.address, HEADER_TIMESTAMP: str(ts), HEADER_EPOCH: str(int(epoch_id)),
                HEADER_AUTHORIZATION: sig}


def _setting(environ: Mapping[str, object], name: str) -> str | None:
    # the environment variable, or the same name lower-cased (argparse dests of --gonka-operator-* options)
    for key in (name, name.lower()):
        value = environ.get(key)
        if value is not None and str(value).strip():
            return str(value).strip()
    return None


def operator_from_env(environ: Mapping[str, object]) -> Operator | None:
    """The operator configured by ``GONKA_OPERATOR_ADDRESS`` + ``GONKA_OPERATOR_KEY_FILE`` (and optionally
    ``GONKA_OPERATOR_MEMBER``, the group member a warm-key address acts for), or None when neither is set.

    ``environ``: the settings as a mapping (the CLI passes GONKA_OPERATOR_* resolved from its settings and options);
    a mapping of parsed CLI options keyed by the lower-cased names
    (``gonka_operator_address`` …) works too. Raises :class:`OperatorConfigError` when only one is set or the key
    file is unusable."""
    env = environ
    address, key_file = _setting(env, ENV_ADDRESS), _setting(env, ENV_KEY_FILE)
    if address is None and key_file is None:
        return None
    if address is None:
        raise OperatorConfigError(f"{ENV_KEY_FILE} is set but {ENV_ADDRESS} is not")
    if key_file is None:
        raise OperatorConfigError(f"{ENV_ADDRESS} is set but {ENV_KEY_FILE} is not")
    return Operator(address, read_key_file(key_file), _setting(env, ENV_MEMBER))

"""Devnet identities for operator mode, and the payload route's authentication as real hosts do it.

Every simulated participant has the deterministic keys of :mod:`indexer.devnet.keys`: its account (cold) key and
one warm key, an authz grantee of the participant. So tests and the demo can run the indexer as any host:
:func:`write_operator_key` puts a participant's (or its warm key's) key into a key file operator mode reads.

:func:`authenticate` follows ``HostManager.authenticatePayloadRequest`` (gonka-ai/gonka
``devshard/cmd/devshardd/session/manager.go`` at df69efb70ade57781349bc8eabc0de0662413c00) check by check, with the
same status codes and messages (:data:`indexer.sources.gonka.signing.REFUSALS`). The timestamp window is measured
against the wall clock, like the host's ``time.Now()``; the devnet's simulated chain clock is unrelated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from coincurve import PublicKey
from coincurve.ecdsa import cdata_to_der, deserialize_compact

from indexer.devnet.keys import Keyring
from indexer.sources.gonka.signing import (
    HEADER_ADDRESS, HEADER_AUTHORIZATION, HEADER_EPOCH, HEADER_TIMESTAMP, MAX_AGE_NS, MAX_FUTURE_NS,
    SECP256K1_N, payload_sign_bytes, write_key_file,
)


def write_operator_key(path: str | os.PathLike, keys: Keyring, address: str) -> Path:
    """Write the devnet key of ``address`` (a participant, or its warm key) as a 0600 key file."""
    return write_key_file(path, keys.secret_of(address))


class DevnetAccounts:
    """What a host asks the chain during payload auth: account keys, and warm keys per granter."""

    def __init__(self, keys: Keyring, participants: Sequence[str]) -> None:
        self.keys = keys
        self.participants = frozenset(participants)

    def granter_of_warm(self, address: str) -> str | None:
        """``VerifyWarmKey``: the participant that ``address`` is a warm key of."""
        granter = self.keys.granter_of(address)
        return granter if granter in self.participants else None

    def keys_of(self, granter: str) -> list[bytes]:
        """``getValidatorPubKeys``: the granter's account key, then its grantees' keys."""
        if granter not in self.participants:
            return []
        return [self.keys.public_key(granter), self.keys.public_key(self.keys.warm_of(granter))]


def verify_cosmos_secp256k1(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Cosmos SDK ``secp256k1.PubKey.VerifySignature``: 64-byte ``r ‖ s``, low s, ECDSA over sha256(message)."""
    if len(signature) != 64:
        return False
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
    if not (0 < r < SECP256K1_N and 0 < s <= SECP256K1_N // 2):  # high s is refused as malleable
        return False
    try:
        der = cdata_to_der(deserialize_compact(signature))
        return PublicKey(public_key).verify(der, message, hasher=lambda m: hashlib.sha256(m).digest())
    except (ValueError, TypeError):
        return False


def _header(headers: Mapping[str, str], name: str) -> str:
    # Go's Header.Get: case-insensitive, first value, "" when absent
    wanted = name.lower()
    return next((v for k, v in headers.items() if k.lower() == wanted), "")


def authenticate(headers: Mapping[str, str], inference_id: str, group: Sequence[str], accounts: DevnetAccounts,
                 now_ns: Callable[[], int] = time.time_ns) -> str | None:
    """None if the request may read payloads of an escrow with slot addresses ``group``, else the refusal's key
    in :data:`REFUSALS`. Same order of checks as the host."""
    address, ts_text = _header(headers, HEADER_ADDRESS), _header(headers, HEADER_TIMESTAMP)
    epoch_text, signature = _header(headers, HEADER_EPOCH), _header(headers, HEADER_AUTHORIZATION)
    for value, refusal in ((address, "missing_address"), (ts_text, "missing_timestamp"),
                           (epoch_text, "missing_epoch"), (signature, "missing_signature")):
        if value == "":
            return refusal
    timestamp, epoch = _go_int(ts_text, signed=True), _go_int(epoch_text, signed=False)
    if timestamp is None:
        return "invalid_timestamp"
    if epoch is None:
        return "invalid_epoch"
    age = now_ns() - timestamp
    if age > MAX_AGE_NS:
        return "timestamp_too_old"
    if age < -MAX_FUTURE_NS:
        return "timestamp_in_future"
    granter = address if address in group else next(
        (m for m in dict.fromkeys(group) if accounts.granter_of_warm(address) == m), None)
    if granter is None:
        return "not_group_member"
    keys = accounts.keys_of(granter)
    if not keys:
        return "pubkey_resolution"
    try:
        sig = base64.b64decode(signature, validate=True)  # Go's base64.StdEncoding: strict alphabet and padding
    except (binascii.Error, ValueError):
        return "invalid_signature"
    message = payload_sign_bytes(inference_id, epoch, timestamp, address)
    if any(verify_cosmos_secp256k1(k, message, sig) for k in keys):
        return None
    return "invalid_signature"


def _go_int(text: str, *, signed: bool) -> int | None:
    """``strconv.ParseInt(s, 10, 64)`` / ``ParseUint``: optional sign (signed only), ASCII digits, in range."""
    body = text[1:] if signed and text[:1] in ("+", "-") else text
    if not body or not all("0" <= c <= "9" for c in body):
        return None
    value = int(text)
    if signed:
        return value if -(2**63) <= value < 2**63 else None
    return value if value < 2**64 else None

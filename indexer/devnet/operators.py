"""Devnet identities for operator mode, and the payload route's authentication as real hosts do it.

Every simulated participant gets a deterministic secp256k1 account key (from the scenario seed and its address)
and one warm key (address ``<address>-warm``, an authz grantee of the participant), so tests and the demo can run
the indexer as any host: :func:`write_operator_key` puts a participant's key into a key file operator mode reads.
The keys are public by construction (derived from the seed): they exist only on the devnet.

:func:`authenticate` follows ``HostManager.authenticatePayloadRequest`` (gonka-ai/gonka
``devshard/cmd/devshardd/session/manager.go`` at df69efb70ade57781349bc8eabc0de0662413c00) check by check, with the
same status codes and messages (:data:`indexer.sources.gonka.signing.REFUSALS`). The header names, the time window
and the signed bytes (``getDevBytes`` with its epoch field) are written out here from the upstream source rather than
taken from the client, so that the client is checked against an independent reading. The timestamp window is
measured against the wall clock, like the host's ``time.Now()``; the devnet's simulated chain clock is unrelated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping, Sequence

from coincurve import PrivateKey, PublicKey
from coincurve.ecdsa import cdata_to_der, deserialize_compact

from indexer.sources.gonka.signing import SECP256K1_N, write_key_file

WARM_SUFFIX = "-warm"
# common/utils header names and authenticatePayloadRequest's maxAge / maxFuture
HEADER_ADDRESS, HEADER_TIMESTAMP, HEADER_EPOCH, HEADER_AUTHORIZATION = (
    "X-Validator-Address", "X-Timestamp", "X-Epoch-Id", "Authorization")
MAX_AGE_NS, MAX_FUTURE_NS = 60 * 10**9, 10 * 10**9


def dev_bytes(inference_id: str, epoch: int, timestamp: int, address: str) -> bytes:
    """``getDevBytes``: the inference id, the epoch (left out when 0), the timestamp (left out when <= 0) and the
    signer's address, as decimal text with no separators."""
    head = inference_id + (f"{epoch:d}" if epoch > 0 else "") + (f"{timestamp:d}" if timestamp > 0 else "")
    return f"{head}{address}".encode()


def devnet_secret(seed: int, address: str) -> bytes:
    """The devnet private key of ``address`` (an account or a warm address)."""
    counter = 0
    while True:  # a sha256 output is a valid scalar except with probability ~2^-128; loop for completeness
        secret = hashlib.sha256(f"devnet-operator-key:{seed}:{address}:{counter}".encode()).digest()
        if 0 < int.from_bytes(secret, "big") < SECP256K1_N:
            return secret
        counter += 1


@lru_cache(maxsize=4096)
def devnet_public_key(seed: int, address: str) -> bytes:
    return PrivateKey(devnet_secret(seed, address)).public_key.format(compressed=True)


def warm_address(address: str) -> str:
    return address + WARM_SUFFIX


def write_operator_key(path: str | os.PathLike, seed: int, address: str) -> Path:
    """Write the devnet key of ``address`` (a participant, or its :func:`warm_address`) as a 0600 key file."""
    return write_key_file(path, devnet_secret(seed, address))


class DevnetAccounts:
    """What a host asks the chain during payload auth: account keys, and warm keys per granter."""

    def __init__(self, seed: int, participants: Sequence[str]) -> None:
        self.seed = seed
        self.participants = frozenset(participants)

    def granter_of_warm(self, address: str) -> str | None:
        """``VerifyWarmKey``: the participant that ``address`` is a warm key of."""
        if address.endswith(WARM_SUFFIX):
            granter = address[: -len(WARM_SUFFIX)]
            return granter if granter in self.participants else None
        return None

    def address_of_key(self, public_key: bytes) -> str | None:
        """The devnet address (participant or warm) whose key ``public_key`` (compressed) is: devnet addresses are
        names, so the table stands in for the chain's hash of the key."""
        for participant in sorted(self.participants):
            for address in (participant, warm_address(participant)):
                if devnet_public_key(self.seed, address) == public_key:
                    return address
        return None

    def keys_of(self, granter: str) -> list[bytes]:
        """``getValidatorPubKeys``: the granter's account key, then its grantees' keys."""
        if granter not in self.participants:
            return []
        return [devnet_public_key(self.seed, granter), devnet_public_key(self.seed, warm_address(granter))]


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
    granter = member_for(address, group, accounts)
    if granter is None:
        return "not_group_member"
    keys = accounts.keys_of(granter)
    if not keys:
        return "pubkey_resolution"
    try:
        sig = base64.b64decode(signature, validate=True)  # Go's base64.StdEncoding: strict alphabet and padding
    except (binascii.Error, ValueError):
        return "invalid_signature"
    message = dev_bytes(inference_id, epoch, timestamp, address)
    if any(verify_cosmos_secp256k1(k, message, sig) for k in keys):
        return None
    return "invalid_signature"


def account_json(accounts: DevnetAccounts, address: str) -> dict | None:
    """``/cosmos/auth/v1beta1/accounts/{address}`` of a participant or warm key: its public key, base64."""
    if address not in accounts.participants and accounts.granter_of_warm(address) is None:
        return None
    key = base64.b64encode(devnet_public_key(accounts.seed, address)).decode()
    return {"account": {"@type": "/cosmos.auth.v1beta1.BaseAccount", "address": address, "account_number": "0",
                        "pub_key": {"@type": "/cosmos.crypto.secp256k1.PubKey", "key": key}, "sequence": "0"}}


def grantees_json(accounts: DevnetAccounts, granter: str, msg_type: str) -> dict:
    """``grantees_by_message_type/{granter}/{msg type}``: a participant's warm key for MsgStartInference."""
    if msg_type != "/inference.inference.MsgStartInference" or granter not in accounts.participants:
        return {"grantees": []}
    warm = warm_address(granter)
    return {"grantees": [{"address": warm, "pub_key": base64.b64encode(devnet_public_key(accounts.seed, warm))
                          .decode()}]}


def member_for(address: str, group: Sequence[str], accounts: DevnetAccounts) -> str | None:
    """``findGranterInGroup``: the group member ``address`` is (itself) or acts for (its warm key), or None."""
    if address in group:
        return address
    return next((m for m in dict.fromkeys(group) if accounts.granter_of_warm(address) == m), None)


def _go_int(text: str, *, signed: bool) -> int | None:
    """``strconv.ParseInt(s, 10, 64)`` / ``ParseUint``: optional sign (signed only), ASCII digits, in range."""
    body = text[1:] if signed and text[:1] in ("+", "-") else text
    if not body or not all("0" <= c <= "9" for c in body):
        return None
    value = int(text)
    if signed:
        return value if -(2**63) <= value < 2**63 else None
    return value if value < 2**64 else None

"""The devnet's secp256k1 keys: one for the escrow creator (the gateway user), and per host a cold key (the
participant's account, whose address is the host's chain address) and a warm key (an authz grantee of the participant
for ``/inference.inference.MsgStartInference``, the key mainnet hosts sign devshard messages with).

Every key derives from the scenario seed and a role label (``user``, ``cold:hostA``, ``warm:hostA``), so equal seeds
give equal keys and the published addresses are the real bech32 ``gonka1…`` addresses of those keys. The keys are
public by construction: they exist only on the devnet.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache

from coincurve import PrivateKey

from indexer.sources.gonka.signing import SECP256K1_N
from indexer.verify.signatures import address_of_pubkey

USER = "user"
# the authz message type a warm key is granted for: what the chain's settlement and the hosts accept (see
# gonka-ai/gonka inference-chain/x/inference/keeper/devshard_settlement.go, grantees_by_message_type)
WARM_GRANT_TYPE = "/inference.inference.MsgStartInference"


def devnet_secret(seed: int, label: str) -> bytes:
    """The 32-byte private key of role ``label`` (a valid secp256k1 scalar)."""
    counter = 0
    while True:  # a sha256 output is a valid scalar except with probability ~2^-128; loop for completeness
        secret = hashlib.sha256(f"devnet-key:{seed}:{label}:{counter}".encode()).digest()
        if 0 < int.from_bytes(secret, "big") < SECP256K1_N:
            return secret
        counter += 1


def cold_label(host_name: str) -> str:
    return f"cold:{host_name}"


def warm_label(host_name: str) -> str:
    return f"warm:{host_name}"


@lru_cache(maxsize=4096)
def _key(seed: int, label: str) -> tuple[PrivateKey, str]:
    key = PrivateKey(devnet_secret(seed, label))
    return key, address_of_pubkey(key.public_key.format(compressed=True))


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class Keyring:
    """The keys of one scenario, by label and by address."""

    def __init__(self, seed: int, host_names: list[str]) -> None:
        self.seed = seed
        labels = [USER] + [f(n) for n in host_names for f in (cold_label, warm_label)]
        self._label_of = {self.address(label): label for label in labels}
        self._warm_of = {self.address(cold_label(n)): self.address(warm_label(n)) for n in host_names}
        self._granter_of = {warm: cold for cold, warm in self._warm_of.items()}

    def address(self, label: str) -> str:
        return _key(self.seed, label)[1]

    @property
    def user(self) -> str:
        return self.address(USER)

    def host_address(self, host_name: str) -> str:
        return self.address(cold_label(host_name))

    def warm_of(self, participant: str) -> str | None:
        """The warm key address granted by ``participant`` (None: not a devnet host)."""
        return self._warm_of.get(participant)

    def granter_of(self, address: str) -> str | None:
        """The participant that granted warm key ``address`` (None: not a devnet warm key)."""
        return self._granter_of.get(address)

    def knows(self, address: str) -> bool:
        return address in self._label_of

    def secret_of(self, address: str) -> bytes:
        """The private key of a devnet address (user, host or warm key); KeyError for any other address."""
        return devnet_secret(self.seed, self._label_of[address])

    def public_key(self, address: str) -> bytes:
        return _key(self.seed, self._label_of[address])[0].public_key.format(compressed=True)

    def sign(self, address: str, message: bytes) -> bytes:
        """65-byte ``r ‖ s ‖ v`` (v ∈ {0, 1}) over sha256(``message``), as devshard signers produce it."""
        return _key(self.seed, self._label_of[address])[0].sign_recoverable(message, hasher=sha256)

    def sign_as_host(self, participant: str, message: bytes) -> bytes:
        """What a host signs devshard messages with: its warm key (mainnet hosts do, data/README.md)."""
        return self.sign(self._warm_of[participant], message)

"""Recoverable secp256k1 signatures as devshard hosts and users make them, and the exact bytes each one signs.

Scheme (gonka-ai/gonka @1924b248 ``devshard/signing/secp256k1.go``, ``Secp256k1Signer.Sign`` and
``Secp256k1Verifier.RecoverAddress``): the signer hashes the message bytes with SHA-256 and signs with go-ethereum's
``crypto.Sign``, giving 65 bytes ``r ‖ s ‖ v`` with ``v ∈ {0, 1}``; the verifier recovers the public key
(``crypto.Ecrecover``) and names it by ``addressFromCompressed``: bech32 ``gonka`` of
``ripemd160(sha256(compressed public key))``. Which address must come out (the escrow creator for a user's diff, a
slot's cold key or an authorised warm key for a host) is the caller's check: this module only says who signed.

The signed messages below carry no domain tag: that is what mainnet epoch 272 (protocol ``v1``) shows (every
signature in /work/shared/data/mainnet-e272 recovers to one stable key per host with these bytes). Newer builds put a
tag in front of some messages (``devshard/types/signed_preimage.go`` @0d660980); those are not handled here.
"""
from __future__ import annotations

import functools
import hashlib

import coincurve

from indexer.verify import proto as pb

HRP = "gonka"
_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GEN = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)


class SignatureError(ValueError):
    """A signature that is malformed or recovers to no key (the message says which and why)."""


def _polymod(values: list[int]) -> int:
    chk = 1
    for v in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ v
        for i in range(5):
            if (top >> i) & 1:
                chk ^= _GEN[i]
    return chk


def _hrp_expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def _to5(data: bytes) -> list[int]:
    acc, bits, out = 0, 0, []
    for b in data:
        acc = acc << 8 | b
        bits += 8
        while bits >= 5:
            bits -= 5
            out.append(acc >> bits & 31)
    if bits:
        out.append(acc << (5 - bits) & 31)
    return out


def bech32_encode(hrp: str, data: bytes) -> str:
    """BIP-173 bech32 (not bech32m) of ``data`` bytes, as cosmos addresses are written."""
    five = _to5(data)
    mod = _polymod(_hrp_expand(hrp) + five + [0] * 6) ^ 1
    checksum = [(mod >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(_CHARSET[d] for d in five + checksum)


def bech32_decode(address: str) -> tuple[str, bytes]:
    """(hrp, bytes) of a bech32 address; :class:`SignatureError` when the checksum or characters are wrong."""
    text = address.strip()
    if text.lower() != text and text.upper() != text:
        raise SignatureError(f"bech32 {address!r}: mixed case")
    text = text.lower()
    sep = text.rfind("1")
    if sep < 1 or len(text) - sep < 7:
        raise SignatureError(f"bech32 {address!r}: no separator or checksum")
    hrp, rest = text[:sep], text[sep + 1:]
    try:
        five = [_CHARSET.index(c) for c in rest]
    except ValueError:
        raise SignatureError(f"bech32 {address!r}: character outside the bech32 alphabet") from None
    if _polymod(_hrp_expand(hrp) + five) != 1:
        raise SignatureError(f"bech32 {address!r}: bad checksum")
    acc, bits, out = 0, 0, bytearray()
    for d in five[:-6]:
        acc = acc << 5 | d
        bits += 5
        if bits >= 8:
            bits -= 8
            out.append(acc >> bits & 0xFF)
    if bits >= 5 or acc & ((1 << bits) - 1):
        raise SignatureError(f"bech32 {address!r}: non-zero padding")
    return hrp, bytes(out)


def ripemd160(data: bytes) -> bytes:
    try:
        return hashlib.new("ripemd160", data).digest()
    except ValueError:  # an OpenSSL 3 build without the legacy provider
        raise SignatureError("hashlib has no ripemd160 in this Python build (OpenSSL legacy provider missing); "
                             "addresses cannot be derived") from None


def address_of_pubkey(pubkey: bytes, hrp: str = HRP) -> str:
    """Cosmos address of a secp256k1 public key (33-byte compressed or 65-byte uncompressed)."""
    try:
        compressed = coincurve.PublicKey(pubkey).format(compressed=True)
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"public key {pubkey.hex()[:20]}… ({len(pubkey)} bytes) is not on secp256k1: {exc}") \
            from None
    return _address(compressed, hrp)


@functools.lru_cache(maxsize=4096)
def _address(compressed: bytes, hrp: str) -> str:
    """The address of a compressed key. A session's signers are few (its slots, their warm keys, the user) and sign
    every nonce: each key's hashes and bech32 text are made once (bounded), not per signature."""
    return bech32_encode(hrp, ripemd160(hashlib.sha256(compressed).digest()))


def recover_pubkey(message: bytes, signature: bytes) -> bytes:
    """Compressed public key that made ``signature`` (65 bytes ``r ‖ s ‖ v``) over sha256(``message``)."""
    if len(signature) != 65:
        raise SignatureError(f"signature is {len(signature)} bytes, expected 65 (r ‖ s ‖ v)")
    # go-ethereum's Ecrecover takes recovery ids 0..3 (2 and 3: r is an x coordinate past the group order, which
    # an honest signature all but never has, so such a signature recovers to no key or to another one)
    if signature[64] > 3:
        raise SignatureError(f"signature recovery byte v = {signature[64]}, expected 0 or 1 (a recovery id 0 .. 3)")
    try:
        key = coincurve.PublicKey.from_signature_and_message(signature, message,
                                                             hasher=lambda m: hashlib.sha256(m).digest())
    except ValueError as exc:
        raise SignatureError(f"signature recovers to no key: {exc}") from None
    return key.format(compressed=True)


def recover_address(message: bytes, signature: bytes, hrp: str = HRP) -> str:
    """Address of the key that signed ``message`` (the bytes, unhashed) with ``signature``."""
    return _address(recover_pubkey(message, signature), hrp)  # compressed already: no second parse


def recover_address_as_chain(message: bytes, signature: bytes, hrp: str = HRP) -> str:
    """:func:`recover_address` with the recovery byte read as the chain reads a settlement's host signatures
    (gonka-ai/gonka @1529fbc1 ``inference-chain/x/inference/keeper/devshard_settlement.go``,
    ``recoverCosmosAddress``): it hands ``v + 27`` (a byte) to dcrd's ``ecdsa.RecoverCompact``, whose codes 27..34
    are a recovery id 0..3 with a flag for a compressed key at +4. The address is always made from the compressed
    key, so ``v`` 4..7 settles exactly as ``v - 4``: a settlement signed so was accepted, and is counted here too.
    Any other ``v`` (27, 28, ...) the chain refuses, and so does this. A high ``s`` is accepted by both (neither
    dcrd's recovery nor libsecp256k1's asks for a low ``s``): it recovers the signer's key."""
    if len(signature) == 65 and 4 <= signature[64] <= 7:
        signature = signature[:64] + bytes((signature[64] - 4,))
    elif len(signature) == 65 and signature[64] > 7:
        raise SignatureError(f"signature recovery byte v = {signature[64]}: the chain's compact code v + 27 is "
                             f"outside 27 .. 34")
    return recover_address(message, signature, hrp)


class Unrecovered(str):
    """Stands for the signer of a host-proposed tx whose signature recovers to no key; the text says why. It is never
    an address, so no slot accepts it (:meth:`indexer.verify.apply_txs.TxRules._may_sign` refuses it with this
    reason), while a tx the protocol passes over before it checks the signature (a repeated validation, a vote on a
    resolved inference: gonka-ai/gonka @bb34d444 ``devshard/state/machine.go``, "after dedup") is passed over here
    too, as the hosts do."""


class Recoveries:
    """Addresses recovered before, each under a tag of the exact (message, signature) pair it came from, and the
    recoveries made through this memo. The caller vouches for the first ``prefix`` diffs of the log: they are the
    very bytes these entries were recovered from (the replay's verification keeps the entries in its own database
    beside a hash chain over those diffs). Only signatures inside those diffs are answered from ``known``; every
    other one is recovered, so a pair crafted to share a tag with a kept one gains nothing. The verifier says which
    diff it is reading (:meth:`at`). Failures are never kept."""

    def __init__(self, known: dict[bytes, str] | None = None, prefix: int = 0):
        self.known: dict[bytes, str] = dict(known or {})
        self.prefix = prefix
        self.position = 0  # the diff being read, 0-based in the log's order
        self.recovered = 0  # secp256k1 recoveries made
        self.reused = 0  # answers taken from ``known``
        self.used: set[bytes] = set()  # the tags asked for

    def at(self, position: int) -> None:
        self.position = position

    @staticmethod
    def tag(message: bytes, signature: bytes) -> bytes:
        """16 bytes of sha256(len(message) u32be ‖ message ‖ signature): the entry's key."""
        return hashlib.sha256(len(message).to_bytes(4, "big") + message + signature).digest()[:16]

    def address(self, message: bytes, signature: bytes) -> str:
        """:func:`recover_address`, answered from the memo when this exact pair was recovered before."""
        tag = self.tag(message, signature)
        self.used.add(tag)
        found = self.known.get(tag) if self.position < self.prefix else None
        if found is not None:
            self.reused += 1
            return found
        address = recover_address(message, signature)
        self.recovered += 1
        self.known[tag] = address
        return address

    def kept(self) -> dict[bytes, str]:
        """The entries the checks asked for (recovered now or before): what the evidence just verified needs."""
        return {tag: self.known[tag] for tag in self.used if tag in self.known}


# ---- the signed bytes of each host- and user-signed message (field numbers from devshard/proto/devshard/v1/tx.proto
# ---- @1074652b, state.proto and types at the commits named per function)

def executor_receipt_bytes(*, inference_id: int, prompt_hash: bytes, model: str, input_length: int, max_tokens: int,
                           started_at: int, escrow_id: int | str, confirmed_at: int, observed_height: int = 0,
                           observed_block_hash: bytes = b"", height_fields: tuple[int, int] | None = None) -> bytes:
    """``ExecutorReceiptContent`` the executor signs when it confirms a start (its signature is
    ``MsgConfirmStart.executor_sig``): 1 inference_id, 2 prompt_hash, 3 model, 4 input_length, 5 max_tokens,
    6 started_at, 7 escrow_id (decimal string), 8 confirmed_at (diff.proto @27fd7d3d). v5 (machine.go @c6c474aa) also
    signs the confirm's observed_height / observed_block_hash, at the numbers ``height_fields`` names: a stamp without
    them is refused (ValueError), since no stored proto shows them."""
    fields = [(1, pb.f_uint(1, inference_id)), (2, pb.f_bytes(2, prompt_hash)), (3, pb.f_str(3, model)),
              (4, pb.f_uint(4, input_length)), (5, pb.f_uint(5, max_tokens)), (6, pb.f_uint(6, started_at)),
              (7, pb.f_str(7, str(escrow_id))), (8, pb.f_uint(8, confirmed_at))]
    if observed_height or observed_block_hash:
        if height_fields is None:
            raise ValueError("an executor receipt with a block-height stamp needs the stamp's field numbers")
        height, block = height_fields
        fields += [(height, pb.f_uint(height, observed_height)), (block, pb.f_bytes(block, observed_block_hash))]
        fields.sort(key=lambda f: f[0])
    return b"".join(part for _, part in fields)


def finish_bytes(*, inference_id: int, response_hash: bytes, input_tokens: int, output_tokens: int,
                 executor_slot: int, escrow_id: int | str, observed_height: int = 0, observed_block_hash: bytes = b"",
                 served_hash: bytes = b"") -> bytes:
    """``MsgFinishInference`` without field 6 ``proposer_sig``: what the proposer signs."""
    return pb.concat((pb.f_uint(1, inference_id), pb.f_bytes(2, response_hash), pb.f_uint(3, input_tokens),
                      pb.f_uint(4, output_tokens), pb.f_uint(5, executor_slot), pb.f_str(7, str(escrow_id)),
                      pb.f_uint(8, observed_height), pb.f_bytes(9, observed_block_hash), pb.f_bytes(10, served_hash)))


def validation_bytes(*, inference_id: int, validator_slot: int, valid: bool, escrow_id: int | str) -> bytes:
    """``MsgValidation`` without field 4 ``proposer_sig``: 1 inference_id, 2 validator_slot, 3 valid, 5 escrow_id."""
    return pb.concat((pb.f_uint(1, inference_id), pb.f_uint(2, validator_slot), pb.f_bool(3, valid),
                      pb.f_str(5, str(escrow_id))))


def state_signature_bytes(*, state_root: bytes, escrow_id: int | str, nonce: int) -> bytes:
    """``StateSignatureContent{1 state_root, 2 escrow_id (decimal string), 3 nonce}``: what each host signs to agree
    on a state, and what the chain recovers at settlement (see :mod:`indexer.verify.settlement`)."""
    return pb.concat((pb.f_bytes(1, state_root), pb.f_str(2, str(escrow_id)), pb.f_uint(3, nonce)))


def validation_vote_bytes(*, inference_id: int, voter_slot: int, vote_valid: bool, escrow_id: int | str) -> bytes:
    """``MsgValidationVote`` without field 4 ``proposer_sig``: 1 inference_id, 2 voter_slot, 3 vote_valid,
    5 escrow_id."""
    return pb.concat((pb.f_uint(1, inference_id), pb.f_uint(2, voter_slot), pb.f_bool(3, vote_valid),
                      pb.f_str(5, str(escrow_id))))


def timeout_vote_bytes(*, escrow_id: int | str, inference_id: int, reason: int, accept: bool) -> bytes:
    """``TimeoutVoteContent{1 escrow_id, 2 inference_id, 3 reason, 4 accept}`` (diff.proto @250ebdb3)."""
    return pb.concat((pb.f_str(1, str(escrow_id)), pb.f_uint(2, inference_id), pb.f_uint(3, reason),
                      pb.f_bool(4, accept)))


def error_miss_vote_bytes(*, escrow_id: int | str, inference_id: int, accept: bool, response_hash: bytes) -> bytes:
    """``ErrorMissVoteContent{1 escrow_id, 2 inference_id, 3 accept, 4 response_hash}`` (numbers of the error-miss
    design, ``devshard/docs/proposals/error-finish-miss.md`` @325631c1; the response hash is the record's, as
    ``applyErrorMiss`` @c6c474aa builds it)."""
    return pb.concat((pb.f_str(1, str(escrow_id)), pb.f_uint(2, inference_id), pb.f_bool(3, accept),
                      pb.f_bytes(4, response_hash)))

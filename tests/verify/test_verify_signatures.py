"""Signature recovery on real mainnet data (epoch 272, protocol v1): /work/shared/data/mainnet-e272/ copied from
huxuxuya/grc-p3-cand01 @ d2fe976b ``artifacts/``. Every host-signed message must recover, with the bytes
indexer.verify.signatures builds, to one key per host: its warm key, never the host's own address."""
from __future__ import annotations

import base64
import csv
import hashlib
from collections import defaultdict
from pathlib import Path

import coincurve
import pytest

from indexer.verify import proto as pb
from indexer.verify import signatures as sig

DATA = Path("/work/shared/data/mainnet-e272")


def _rows(name: str) -> list[dict[str, str]]:
    with open(DATA / name, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def executor_rows():
    rows = _rows("devshard_epoch_272_case_executor_rows.csv")
    assert len(rows) == 263
    return rows


@pytest.fixture(scope="module")
def validation_rows():
    rows = _rows("devshard_epoch_272_case_validation_rows.csv")
    assert len(rows) == 130
    return rows


def _receipt(r: dict[str, str]) -> bytes:
    return sig.executor_receipt_bytes(
        inference_id=int(r["inference_id"]), prompt_hash=bytes.fromhex(r["prompt_hash"]), model=r["model"],
        input_length=int(r["input_length_claimed"]), max_tokens=int(r["max_tokens"]),
        started_at=int(r["started_at_unix"]), escrow_id=r["escrow_id"], confirmed_at=int(r["confirmed_at_unix"]))


def _finish(r: dict[str, str]) -> bytes:
    return sig.finish_bytes(
        inference_id=int(r["inference_id"]), response_hash=bytes.fromhex(r["response_hash"]),
        input_tokens=int(r["input_tokens_actual"]), output_tokens=int(r["output_tokens"]),
        executor_slot=int(r["executor_slot"]), escrow_id=r["escrow_id"])


def _validation(r: dict[str, str]) -> bytes:
    return sig.validation_bytes(inference_id=int(r["inference_id"]), validator_slot=int(r["validator_slot"]),
                                valid=r["valid"] == "1", escrow_id=r["escrow_id"])


def test_every_mainnet_host_signature_recovers_to_one_warm_key_per_host(executor_rows, validation_rows):
    keys: dict[str, set[str]] = defaultdict(set)
    counts = {"receipt": 0, "finish": 0, "validation": 0}
    for r in executor_rows:
        keys[r["executor_address"]].add(sig.recover_address(_receipt(r), base64.b64decode(r["executor_sig"])))
        keys[r["executor_address"]].add(sig.recover_address(_finish(r), base64.b64decode(r["proposer_sig"])))
        counts["receipt"] += 1
        counts["finish"] += 1
    for r in validation_rows:
        keys[r["validator_addr"]].add(sig.recover_address(_validation(r), base64.b64decode(r["proposer_sig"])))
        counts["validation"] += 1
    assert counts == {"receipt": 263, "finish": 263, "validation": 130}
    for host, found in keys.items():
        assert len(found) == 1, f"{host}: signatures recover to {sorted(found)}"
        (warm,) = found
        assert warm != host and warm.startswith("gonka1")
    warm_keys = {next(iter(v)) for v in keys.values()}
    assert len(warm_keys) == len(keys)  # no two hosts share a warm key
    assert (len(keys), len({r["executor_address"] for r in executor_rows}),
            len({r["validator_addr"] for r in validation_rows})) == (6, 6, 6)


def test_a_changed_field_recovers_another_key(executor_rows):
    r = executor_rows[0]
    good = sig.recover_address(_receipt(r), base64.b64decode(r["executor_sig"]))
    tampered = dict(r, max_tokens=str(int(r["max_tokens"]) + 1))
    assert sig.recover_address(_receipt(tampered), base64.b64decode(r["executor_sig"])) != good


def test_sign_and_recover_round_trip_matches_the_address_derivation():
    key = coincurve.PrivateKey.from_int(1)
    message = sig.state_signature_bytes(state_root=bytes(32), escrow_id=7, nonce=3)
    signature = key.sign_recoverable(message, hasher=lambda m: hashlib.sha256(m).digest())
    expected = sig.bech32_encode("gonka", hashlib.new("ripemd160", hashlib.sha256(
        key.public_key.format(compressed=True)).digest()).digest())
    assert sig.recover_address(message, signature) == expected
    assert sig.address_of_pubkey(key.public_key.format(compressed=False)) == expected
    hrp, raw = sig.bech32_decode(expected)
    assert hrp == "gonka" and len(raw) == 20


def test_bech32_and_ripemd160_standard_vectors():
    assert sig.bech32_encode("a", b"") == "a12uel5l"  # BIP-173 valid test vector
    assert sig.bech32_decode("A12UEL5L") == ("a", b"")
    assert sig.ripemd160(b"").hex() == "9c1185a5c5e9fc54612808977ee8f548b2258d31"
    assert sig.ripemd160(b"abc").hex() == "8eb208f7e05d987a9b044a8e98c6b087f15a0bfc"


@pytest.mark.parametrize("address, reason", [
    ("a12uel5m", "bad checksum"),
    ("A12uel5l", "mixed case"),
    ("a1b2uel5l", "outside the bech32 alphabet"),
    ("noseparator", "no separator"),
])
def test_bech32_decode_rejects(address, reason):
    with pytest.raises(sig.SignatureError, match=reason):
        sig.bech32_decode(address)


@pytest.mark.parametrize("signature, reason", [
    (bytes(64), "64 bytes, expected 65"),
    (bytes(64) + b"\x1b", "v = 27"),
    (bytes(64) + b"\x00", "recovers to no key"),
])
def test_malformed_signatures_are_refused(signature, reason):
    with pytest.raises(sig.SignatureError, match=reason):
        sig.recover_pubkey(b"message", signature)


def test_a_public_key_off_the_curve_is_refused():
    with pytest.raises(sig.SignatureError, match="not on secp256k1"):
        sig.address_of_pubkey(b"\x02" + b"\xff" * 32)


def test_proto_encoding_leaves_defaults_out_and_negative_int64_takes_ten_bytes():
    assert sig.validation_bytes(inference_id=0, validator_slot=0, valid=False, escrow_id="") == b""
    assert pb.f_uint(6, -1) == b"\x30" + b"\xff" * 9 + b"\x01"
    with pytest.raises(pb.ProtoError, match="out of range"):
        pb.uvarint(1 << 64)


def test_recoveries_answer_only_inside_the_vouched_prefix_and_keep_only_what_was_asked():
    key, other = coincurve.PrivateKey.from_int(7), coincurve.PrivateKey.from_int(8)
    first, second = b"first message", b"second message"
    s1, s2 = key.sign_recoverable(first), other.sign_recoverable(second)
    signer = sig.address_of_pubkey(key.public_key.format())
    memo = sig.Recoveries()  # vouches for nothing: every signature is recovered, and kept
    assert memo.address(first, s1) == signer == memo.address(first, s1)
    assert (memo.recovered, memo.reused) == (2, 0)
    with pytest.raises(sig.SignatureError):
        memo.address(second, s2[:64])  # a failure is never kept
    assert list(memo.kept().values()) == [signer]
    # inside the prefix the caller vouches for, a kept pair is answered without a recovery
    again = sig.Recoveries(memo.kept(), prefix=2)
    again.at(1)
    assert again.address(first, s1) == signer and (again.recovered, again.reused) == (0, 1)
    assert again.address(second, s2) == sig.address_of_pubkey(other.public_key.format()) and again.recovered == 1
    assert again.address(first + b"!", s1) != signer  # the tag is of the exact bytes
    # past it, the same pair is recovered again
    again.at(2)
    assert again.address(first, s1) == signer and (again.recovered, again.reused) == (3, 1)
    assert len(again.kept()) == 3 and all(len(tag) == 16 for tag in again.kept())

"""Operator-mode signatures against vectors made without the indexer's code (tests/support/operator_vectors.py wrote
tests/cases/operator-signing-vectors.json from the upstream field layouts written out by hand). RFC 6979 nonces make
the signatures deterministic, so they compare byte for byte; the devnet's own preimages are held to them too."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.devnet.operators import dev_bytes
from indexer.devnet.peerrpc import _attach_preimage_digest
from indexer.sources.gonka.rpcpayloads import attach_message
from indexer.sources.gonka.signing import Operator, payload_sign_bytes
from indexer.verify.signatures import address_of_pubkey

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "cases" / "operator-signing-vectors.json").read_text())
KEYS = VECTORS["keys"]


def _operator(index: int, address: str | None = None) -> Operator:
    key = KEYS[index]
    return Operator(address or key["address"], bytes.fromhex(key["secret_hex"]))


@pytest.mark.parametrize("key", range(len(KEYS)))
def test_key_address_is_the_bech32_of_the_key(key):
    op = _operator(key)
    assert op.public_key.hex() == KEYS[key]["public_key_hex"]
    assert op.key_address == KEYS[key]["address"] == address_of_pubkey(op.public_key)


@pytest.mark.parametrize("case", VECTORS["payload_requests"], ids=lambda c: f"{c['inference_id']}-{c['epoch_id']}")
def test_payload_request_bytes_and_signature_match_the_vectors(case):
    signed = payload_sign_bytes(case["inference_id"], case["epoch_id"], case["timestamp_ns"], case["address"])
    assert signed.hex() == case["signed_bytes_hex"]
    assert dev_bytes(case["inference_id"], case["epoch_id"], case["timestamp_ns"], case["address"]) == signed
    op = _operator(case["key"], case["address"])
    assert op.sign(signed) == case["authorization"]
    headers = op.payload_headers(case["inference_id"], case["epoch_id"], now_ns=case["timestamp_ns"]) \
        if case["timestamp_ns"] > 0 else None
    if headers is not None:
        assert headers["Authorization"] == case["authorization"]
        assert headers["X-Timestamp"] == str(case["timestamp_ns"]) and headers["X-Epoch-Id"] == str(case["epoch_id"])


@pytest.mark.parametrize("case", VECTORS["attach"], ids=lambda c: c["attach_nonce_hex"][:8])
def test_attach_message_and_recoverable_signature_match_the_vectors(case):
    args = (case["host_address"], case["timestamp"], case["peer_address"], bytes.fromhex(case["attach_nonce_hex"]),
            case["protocol_version"], bytes.fromhex(case["channel_binding_hex"]))
    message = attach_message(*args)
    assert message.hex() == case["message_hex"]
    assert _attach_preimage_digest(*args) == message
    signature = _operator(case["key"]).sign_recoverable(message)
    assert len(signature) == 65 and signature[64] in (0, 1)
    assert signature.hex() == case["signature_hex"]


def test_a_changed_field_changes_the_attach_message():
    case = VECTORS["attach"][0]
    base = (case["host_address"], case["timestamp"], case["peer_address"], bytes.fromhex(case["attach_nonce_hex"]))
    reference = attach_message(*base)
    # the length prefixes keep adjacent fields apart: moving a byte from one to the next is another message
    shifted = (case["host_address"][:-1], case["timestamp"], case["host_address"][-1] + case["peer_address"], base[3])
    assert attach_message(*shifted) != reference
    assert attach_message(base[0], base[1] + 1, base[2], base[3]) != reference

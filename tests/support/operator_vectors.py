"""Write tests/cases/operator-signing-vectors.json: operator-mode signatures made without the indexer's own code.

Run from the repository root: ``python tests/support/operator_vectors.py``. The file it writes is committed; the tests
(tests/sources/test_operator_vectors.py) compare the client's signed bytes and signatures with it byte for byte.

Nothing here imports ``indexer``: the preimages are laid out by hand from the upstream Go source, so a mistake in the
client's preimage cannot also be in the expected values. secp256k1 ECDSA nonces are RFC 6979 (libsecp256k1 through
coincurve), so the signatures are deterministic and compare byte for byte.

Layouts followed (gonka-ai/gonka and its forks, read in the public file index):

* payload request, ``getDevBytes`` with the epoch field (``inference-chain/x/inference/calculations/
  signature_validate.go`` as in the fork zpoken/gonka @89ff8bdb32bca19688cd505bef749a468b281bf4; gonka-ai/gonka
  @5b1abfe90db7 and @2566be19c155 predate the field). Checked by the host in
  ``devshard/cmd/devshardd/session/manager.go`` ``authenticatePayloadRequest`` with ``SignatureComponents{Payload:
  inference id, EpochId, Timestamp, TransferAddress: X-Validator-Address}``: decimal strings concatenated, the epoch
  left out when 0, the timestamp when <= 0. Cosmos ``PrivKey.Sign``: 64-byte ``r || s`` (low s) over sha256(bytes),
  sent base64 (standard alphabet, padded);
* Connect ``PeerAuthService.Attach`` (``devshard/transport/rpcauth.go`` @0d6609808a35
  ``AttachSignatureMessage``): sha256 of ``"devshard.attach.v1"``, then length-prefixed (u32 big-endian) host address,
  the unix-seconds timestamp as u64 big-endian (not length-prefixed), then length-prefixed peer address, attach
  nonce, protocol version ``"devshard.transport.v1"`` and channel binding. ``Secp256k1Signer.Sign``
  (``devshard/signing/secp256k1.go`` @1924b248f808) hashes that digest once more with sha256 and signs it with
  go-ethereum ``crypto.Sign``: 65 bytes ``r || s || v``, v in {0, 1};
* the address of a key (``addressFromCompressed``): bech32 ``gonka`` of ripemd160(sha256(compressed public key)).
"""
from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys
from pathlib import Path

from coincurve import PrivateKey

OUT = Path(__file__).resolve().parents[1] / "cases" / "operator-signing-vectors.json"
KEYS = [hashlib.sha256(f"operator-signing-vector-key-{i}".encode()).digest() for i in range(3)]

_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def _polymod(values: list[int]) -> int:
    generators = [0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3]
    chk = 1
    for v in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ v
        for i in range(5):
            chk ^= generators[i] if (top >> i) & 1 else 0
    return chk


def bech32(hrp: str, payload: bytes) -> str:
    acc, bits, words = 0, 0, []
    for byte in payload:
        acc = (acc << 8) | byte
        bits += 8
        while bits >= 5:
            bits -= 5
            words.append((acc >> bits) & 31)
    if bits:
        words.append((acc << (5 - bits)) & 31)
    expanded = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]
    mod = _polymod(expanded + words + [0] * 6) ^ 1
    checksum = [(mod >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(_CHARSET[w] for w in words + checksum)


def address(secret: bytes) -> str:
    compressed = PrivateKey(secret).public_key.format(compressed=True)
    return bech32("gonka", hashlib.new("ripemd160", hashlib.sha256(compressed).digest()).digest())


def dev_bytes(inference_id: str, epoch: int, timestamp: int, signer: str) -> bytes:
    text = inference_id
    if epoch > 0:
        text += "%d" % epoch
    if timestamp > 0:
        text += "%d" % timestamp
    return (text + signer).encode()


def cosmos_sign(secret: bytes, message: bytes) -> bytes:
    digest = hashlib.sha256(message).digest()
    return PrivateKey(secret).sign_recoverable(digest, hasher=None)[:64]


def attach_digest(host: str, timestamp: int, peer: str, nonce: bytes, version: str, binding: bytes) -> bytes:
    def lp(b: bytes) -> bytes:
        return struct.pack(">I", len(b)) + b
    raw = (b"devshard.attach.v1" + lp(host.encode()) + struct.pack(">Q", timestamp % 2**64) + lp(peer.encode())
           + lp(nonce) + lp(version.encode()) + lp(binding))
    return hashlib.sha256(raw).digest()


def eth_sign(secret: bytes, message: bytes) -> bytes:
    return PrivateKey(secret).sign_recoverable(hashlib.sha256(message).digest(), hasher=None)


def build() -> dict:
    keys = [{"secret_hex": k.hex(), "address": address(k),
             "public_key_hex": PrivateKey(k).public_key.format(compressed=True).hex()} for k in KEYS]
    payload_cases = [
        (0, "6179", 408, 1790813400123456789, None),
        (1, "1", 408, 1790813400000000000, None),
        (0, "42", 0, 1790813400000000001, None),          # epoch 0: left out (old devshardd builds)
        (2, "77", 409, 0, None),                            # timestamp 0: left out
        (1, "6179", 408, 1790813400123456789, "gonka1operatorwarmkeyaddressforvectors"),  # a name other than the key's
    ]
    payloads = []
    for key, iid, epoch, ts, signer in payload_cases:
        name = signer or keys[key]["address"]
        message = dev_bytes(iid, epoch, ts, name)
        payloads.append({"key": key, "inference_id": iid, "epoch_id": epoch, "timestamp_ns": ts, "address": name,
                         "signed_bytes_hex": message.hex(),
                         "authorization": base64.b64encode(cosmos_sign(KEYS[key], message)).decode()})
    attach_cases = [
        (0, keys[1]["address"], 1790813400, bytes(range(16)), b""),
        (1, keys[0]["address"], 1790813401, bytes.fromhex("ff" * 32), b""),
        (2, keys[0]["address"], 1790813402, b"0123456789abcdef0123", b"\x01\x02"),
    ]
    attaches = []
    for key, host, ts, nonce, binding in attach_cases:
        digest = attach_digest(host, ts, keys[key]["address"], nonce, "devshard.transport.v1", binding)
        attaches.append({"key": key, "host_address": host, "timestamp": ts, "peer_address": keys[key]["address"],
                         "attach_nonce_hex": nonce.hex(), "protocol_version": "devshard.transport.v1",
                         "channel_binding_hex": binding.hex(), "message_hex": digest.hex(),
                         "signature_hex": eth_sign(KEYS[key], digest).hex()})
    return {"generator": "tests/support/operator_vectors.py", "keys": keys, "payload_requests": payloads,
            "attach": attaches}


def main() -> int:
    OUT.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

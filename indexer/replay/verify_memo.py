"""What the verification stage keeps between runs so it never does the same signature recovery twice for the same
evidence: an open escrow's log grows every poll cycle and is verified again each time, and without this every
recovery of nonces 1..n would be paid again at every cycle (quadratic over the escrow's life).

Per escrow, ``replay.escrow_verification`` keeps:

- ``prefix_nonces`` and ``prefix_chain``: a sha256 hash chain over the first ``prefix_nonces`` stored diffs in nonce
  order (each diff's nonce, stored content, user signature and signed root, as the database holds them), seeded with
  the escrow id, its creator and protocol version and the verifier's version: the evidence prefix whose diffs passed
  every check made on them;
- ``prefix_signers`` and ``prefix_recoveries``: the recoveries made for that evidence, as 18-byte entries (the
  16-byte tag of the exact (message, signature) pair, :meth:`indexer.verify.signatures.Recoveries.tag`, then the
  2-byte big-endian index of the recovered address in ``prefix_signers``).

At the next verification the stored diffs are hashed again; only when the first ``prefix_nonces`` of them give the
same chain are the recoveries handed to the verifier (a changed byte anywhere in the prefix, or a new verifier
version, gives a different chain and every signature is recovered again). The state machine and every root are
always recomputed: only the recoveries inside the prefix are reused (a diff after it is recovered in full, whatever
the memo holds), and each is looked up by a tag of the very (message, signature) bytes it was recovered from.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from indexer.verify.signatures import Recoveries

TAG_BYTES = 16
_ENTRY = TAG_BYTES + 2
MAX_SIGNERS = 1 << 16  # what a 2-byte index can name; an escrow with more distinct signers keeps no memo


@dataclass(frozen=True)
class Memo:
    """A stored memo as read back: the prefix it covers and its recoveries (tag -> address)."""
    nonces: int
    chain: bytes
    known: dict[bytes, str]


def _part(data: bytes | None) -> bytes:
    """Length-prefixed, with NULL distinct from empty."""
    return b"\xff\xff\xff\xff" if data is None else len(data).to_bytes(4, "big") + data


def chain_links(seed: tuple, rows: list[tuple]) -> list[bytes]:
    """The chain after each stored diff: element k covers the first k + 1 ``rows`` (nonce, content, user_sig,
    source_host, post_state_root, state_hash as :func:`indexer.replay.material.load_material` reads them; the
    source is left out, it says where the bytes came from, not what they are; the state_hash stands in for a root
    not served, so it is part of what was signed)."""
    h = hashlib.sha256(b"\n".join(_part(None if v is None else str(v).encode("utf-8")) for v in seed)).digest()
    out = []
    for nonce, content, user_sig, _, root, state_hash in rows:
        h = hashlib.sha256(h + int(nonce).to_bytes(8, "big", signed=True) + _part(_text(content))
                           + _part(_text(user_sig)) + _part(_text(root)) + _part(_text(state_hash))).digest()
        out.append(h)
    return out


def _text(value: str | None) -> bytes | None:
    return None if value is None else value.encode("utf-8")


def reusable(memo: Memo | None, links: list[bytes]) -> Recoveries:
    """The recoveries to verify with: the stored ones when the stored diffs' first ``memo.nonces`` hash to the stored
    chain, else an empty memo."""
    if memo is None or not 0 < memo.nonces <= len(links) or links[memo.nonces - 1] != memo.chain:
        return Recoveries()
    return Recoveries(memo.known, prefix=memo.nonces)


def pack(known: dict[bytes, str]) -> tuple[list[str], bytes] | None:
    """(signers, entries) as stored; None when there are more distinct signers than an index can name."""
    signers = sorted(set(known.values()))
    if len(signers) > MAX_SIGNERS:
        return None
    index = {a: i for i, a in enumerate(signers)}
    return signers, b"".join(tag + index[a].to_bytes(2, "big") for tag, a in sorted(known.items()))


def unpack(nonces: int | None, chain: bytes | None, signers: list[str] | None, entries: bytes | None) -> Memo | None:
    """A stored memo, or None when there is none or it does not read (then nothing is reused)."""
    if not nonces or chain is None or signers is None or entries is None or len(entries) % _ENTRY:
        return None
    known = {}
    for at in range(0, len(entries), _ENTRY):
        i = int.from_bytes(entries[at + TAG_BYTES:at + _ENTRY], "big")
        if i >= len(signers):
            return None
        known[bytes(entries[at:at + TAG_BYTES])] = signers[i]
    return Memo(nonces, bytes(chain), known)

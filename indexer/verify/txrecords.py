"""The tx records a signed log implies, and the first place where stored tx records say something else.

The replay and the rules read the tx tables (``rec.start_tx`` … ``rec.error_miss_tx``), not the signed diffs; the
verification stage vouches for the diffs. The records carry the diffs' level only when they are the diffs' own txs:
this module projects each tx the verifier decoded (:func:`indexer.verify.diff.decode_txs`) onto the fields of its
record (as :func:`indexer.wire.normalize.tx_record` writes them, the fields the replay and the rules read) and
compares that with the stored records of one escrow, both ways: a record whose fields differ, a record of a tx the
log does not have, and a tx of the log with no record all count.

A record's key (kind, inference_id and, for validations and votes, the slot) holds one row while the log may repeat
a validation or vote of one slot (the protocol ignores the repeat): a record agrees when it equals any of the log's
txs of its key. A record without a ``tx_index`` does not state its place in the diff and is compared without it.
An empty string or bytes field is absent on the wire (proto3), so it compares equal to a null column.
"""
from __future__ import annotations

from dataclasses import dataclass

from indexer.verify import diff
from indexer.verify.bundle import Bundle

REASONS = {1: "refused", 2: "execution"}  # TimeoutReason -> the record's word; other reasons make no record
# the compared fields of each record kind, after (diff_nonce, tx_index); the slot of validations and votes is keyed
FIELDS = {
    "start": ("prompt_hash", "model", "input_length", "max_tokens", "started_at"),
    "confirm_start": ("confirmed_at",),
    "finish": ("executor_slot", "input_tokens", "output_tokens", "response_hash"),
    "validation": ("valid",),
    "validation_vote": ("vote_valid",),
    "timeout": ("reason", "votes"),
    "error_miss": ("votes",),
}
SLOT_KEYS = {"validation": "validator_slot", "validation_vote": "voter_slot"}
_HEX = ("prompt_hash", "response_hash")


@dataclass(frozen=True)
class Entry:
    """One tx as its record states it: the key, where it is (tx_index None: not stated) and the compared fields."""
    key: tuple
    nonce: int
    tx_index: int | None
    fields: tuple


@dataclass(frozen=True)
class Contradiction:
    nonce: int
    reason: str


def _blank(value):
    return None if value in ("", b"") else value


def log_entry(nonce: int, tx: dict) -> Entry | None:
    """The record ``tx`` (a decoded tx with its ``tx_index``) makes, or None for a tx that makes none."""
    kind = tx["kind"]
    if kind not in FIELDS or (kind == "timeout" and tx["reason"] not in REASONS):
        return None
    values = []
    for name in FIELDS[kind]:
        value = tx[name]
        if name in _HEX:
            value = value.hex()
        elif name == "reason":
            value = REASONS[value]
        elif name == "votes":
            value = tuple((slot, accept) for slot, accept, _ in value)
        values.append(_blank(value))
    slot = tx[SLOT_KEYS[kind]] if kind in SLOT_KEYS else None
    return Entry((kind, tx["inference_id"], slot), nonce, tx["tx_index"], tuple(values))


def _unrecovered(message: bytes, signature: bytes) -> str:
    """A stand-in for signature recovery where only the txs' fields are wanted: no signer enters a record."""
    return ""


def log_entries(b: Bundle, applied: dict[int, list[dict]] | None) -> list[Entry]:
    """The records the signed log of ``b`` implies: of the txs the replay decoded and applied (``applied``: nonce ->
    txs), or, when no replay was made (``applied`` None: a version whose rules are not ported), of every diff
    decoded here without recovering any signature (no signer enters a record). ``ValueError`` naming the nonce
    when such a diff cannot be decoded."""
    if applied is not None:
        return [e for nonce, txs in applied.items() for e in (log_entry(nonce, tx) for tx in txs) if e is not None]
    out = []
    for d in b.diffs:
        try:
            txs = diff.decode_txs(diff.read_diff_content(d.content), b.escrow_id, None, _unrecovered)
        except ValueError as exc:
            raise ValueError(f"signed diff {d.nonce}: {exc}") from None
        out.extend(e for e in (log_entry(d.nonce, tx) for tx in txs) if e is not None)
    return out


def record_entry(kind: str, inference_id: int, slot: int | None, nonce: int, tx_index: int | None,
                 values: tuple) -> Entry:
    """A stored record as an :class:`Entry`: ``values`` in :data:`FIELDS` order, votes as (slot, accept) pairs."""
    return Entry((kind, inference_id, slot), nonce, tx_index, tuple(_blank(v) for v in values))


def _name(key: tuple) -> str:
    kind, inference_id, slot = key
    return f"{kind} record of inference {inference_id}" + ("" if slot is None else f" slot {slot}")


def _agrees(record: Entry, tx: Entry) -> bool:
    return (record.nonce == tx.nonce and record.fields == tx.fields
            and (record.tx_index is None or record.tx_index == tx.tx_index))


def _nearest(record: Entry, txs: list[Entry]) -> Entry:
    """The log's tx of the record's key to compare it with: the one at its nonce, else the first."""
    return next((t for t in txs if t.nonce == record.nonce), txs[0])


def _difference(record: Entry, tx: Entry) -> str:
    """What the record states that ``tx`` does not."""
    if record.nonce != tx.nonce:
        return f"says nonce {record.nonce}, the signed log has it at nonce {tx.nonce}"
    for name, mine, theirs in zip(FIELDS[record.key[0]], record.fields, tx.fields):
        if mine != theirs:
            return f"says {name} {_shown(mine)}, the signed diff at nonce {tx.nonce} says {_shown(theirs)}"
    return f"says tx {record.tx_index} of nonce {record.nonce}, the signed diff has it as tx {tx.tx_index}"


def _shown(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(f"slot {s} {'accept' if a else 'reject'}" for s, a in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def contradictions(log: list[Entry], records: list[Entry], below: int | None = None) -> list[Contradiction]:
    """Every disagreement between the log's txs and the stored records, by nonce (each key once). With ``below``,
    the log is known only before that nonce (the replay stopped there): records from it on are not compared."""
    txs: dict[tuple, list[Entry]] = {}
    for tx in log:
        txs.setdefault(tx.key, []).append(tx)
    out = []
    stored = {record.key for record in records}
    for record in records:
        if below is not None and record.nonce >= below:
            continue
        found = txs.get(record.key)
        if not found:
            out.append(Contradiction(record.nonce, f"the {_name(record.key)} (nonce {record.nonce}) is not a tx of "
                                                   f"the signed log"))
        elif not any(_agrees(record, tx) for tx in found):
            tx = _nearest(record, found)
            out.append(Contradiction(min(record.nonce, tx.nonce), f"the {_name(record.key)} {_difference(record, tx)}"))
    for key, found in txs.items():
        if key not in stored:
            tx = found[0]
            out.append(Contradiction(tx.nonce, f"the signed diff at nonce {tx.nonce} has tx {tx.tx_index}, whose "
                                               f"{_name(key)} is not stored"))
    out.sort(key=lambda c: c.nonce)
    return out

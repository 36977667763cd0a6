"""The evidence bundle: one escrow's proof material in a versioned JSON document (``"format": "devshard-evidence/1"``)
that :mod:`indexer.verify.evidence` checks without a database or any trust in the party that wrote it.

Layout (every byte string is standard base64 of the exact bytes served or broadcast, never re-encoded)::

    {"format": "devshard-evidence/1",
     "escrow_id": "124",                      the chain escrow id as the decimal string the diffs carry
     "protocol_version": "v4.1",              the session's protocol version (selects the rules and root composition)
     "creator": "gonka1...",                  the escrow creator: every diff's user signature must recover to it
     "amount": 1000000,                       the escrow amount (the session's opening balance)
     "group": [{"slot": 0, "address": "gonka1...", "warm_keys": ["gonka1..."][, "grants": "live"|"none"]}, ...],
                                              grants absent: warm_keys are the participant's grants as of the
                                              epoch's end; "live": read from today's values only, "none": not read
                                              (a signature by an unlisted key is then not checked, not failed)
     "config": {"token_price", "vote_threshold", "seal_grace_seconds", "auto_seal_every", "fee_per_nonce",
                "create_fee"[, "execution_timeout"][, "seal_grace_nonces"]},  the session parameters apply.Config
                                              needs (integers; an optional one absent when not known)
     "diffs": [{"nonce": 1, "content": b64 DiffContent, "user_sig": b64 65 bytes}, ...],
     "settlement": null | {"msg": b64 MsgSettleDevshardEscrow, "tx_hash": str|null, "height": int|null,
                           "tx_raw": b64 TxRaw|null, "max_nonce": int, "approved_versions": [str, ...]
                           [, "read_from": str]},  without tx_raw the settled check is not made (nothing binds msg
                                              to the transaction); read_from says where msg was read
     ["settlement_missing": {"reason": str, "fails": bool},]  with no settlement: why; fails: the stored one shows
                                              the settled check fails (it is then failed, else not checked)
     ["notes": [str, ...],]                   what the author could not check (printed, never a pass)
     "penalties": [{"rule": str, "inference_id": int, "status": str, "numbers": {name: int},
                    "sum": [name, ...], "compare": "<=", "against": name, "holds": bool,
                    "limit_source": {"parameter": str, "epoch": int|null, "height": int|null, "source": str}}]}

A bundle is untrusted input: :func:`load_bundle` bounds its size, refuses unknown formats, unknown and repeated keys,
floats and out-of-range integers, and names the file and JSON path of the first problem in one line (:class:`BundleError`).
"""
from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass, field
from typing import Any

from indexer.verify import apply

FORMAT = "devshard-evidence/1"
MAX_BUNDLE_BYTES = 256 << 20
MAX_TEXT = 256  # ids, addresses, versions, rule and parameter names, sources
MAX_SLOTS = 1024
MAX_NOTE = 2000  # a note or a reason: it names records and quotes served text
GRANTS = ("exact", "live", "none")
U64 = (1 << 64) - 1
CONFIG_FIELDS = ("token_price", "vote_threshold", "seal_grace_seconds", "auto_seal_every", "fee_per_nonce",
                 "create_fee")
# execution_timeout: seconds, the v5 rules need it (a Finished record's seal clock); seal_grace_nonces: absent when
# the escrow published 0, whose build default is not known (a replay under sealing rules is then not checkable)
CONFIG_OPTIONAL = ("execution_timeout", "seal_grace_nonces")
COMPARISONS = ("<=", "<", ">=", ">", "==", "!=")


class BundleError(ValueError):
    """An unusable bundle (unreadable, malformed, unknown format); the message is one line naming file and path."""


@dataclass(frozen=True)
class Host:
    slot: int
    address: str
    warm_keys: tuple[str, ...] = ()
    grants: str = "exact"  # how warm_keys were read (GRANTS): only "exact" lists refute a key


@dataclass(frozen=True)
class SignedDiff:
    nonce: int  # the nonce the bundle claims; the signed DiffContent carries the one that counts
    content: bytes
    user_sig: bytes


@dataclass(frozen=True)
class Settlement:
    msg: bytes
    max_nonce: int
    approved_versions: tuple[str, ...] = ()
    tx_hash: str | None = None
    height: int | None = None
    tx_raw: bytes | None = None  # the broadcast TxRaw when known: binds msg to tx_hash
    read_from: str | None = None  # where msg was read when there is no tx_raw


@dataclass(frozen=True)
class SettlementMissing:
    """Why a bundle carries no settlement; ``fails``: what was stored shows the settled check fails."""
    reason: str
    fails: bool = False


@dataclass(frozen=True)
class Penalty:
    """A penalty's stated derivation: ``sum(numbers[n] for n in sum) <compare> numbers[against]`` is ``holds``, and
    inference ``inference_id`` has ``status`` in the replayed state. ``limit_source`` says where the governance limit
    came from (parameter, snapshot epoch and height, source)."""
    rule: str
    inference_id: int
    status: str
    numbers: dict[str, int]
    sum: tuple[str, ...]
    compare: str
    against: str
    holds: bool
    limit_source: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Bundle:
    escrow_id: str
    protocol_version: str
    creator: str
    amount: int
    group: tuple[Host, ...]
    config: apply.Config
    diffs: tuple[SignedDiff, ...]
    settlement: Settlement | None = None
    penalties: tuple[Penalty, ...] = ()
    settlement_missing: SettlementMissing | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(to_document(self), indent=1, sort_keys=True) + "\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def to_document(b: Bundle) -> dict:
    """The JSON document of ``b`` (what :func:`parse_bundle` reads back to an equal Bundle)."""
    settlement = None
    if b.settlement is not None:
        s = b.settlement
        settlement = {"msg": _b64(s.msg), "tx_hash": s.tx_hash, "height": s.height, "max_nonce": s.max_nonce,
                      "approved_versions": list(s.approved_versions),
                      "tx_raw": None if s.tx_raw is None else _b64(s.tx_raw)}
        if s.read_from is not None:
            settlement["read_from"] = s.read_from
    extra: dict[str, Any] = {}
    if b.settlement_missing is not None:
        extra["settlement_missing"] = {"reason": b.settlement_missing.reason, "fails": b.settlement_missing.fails}
    if b.notes:
        extra["notes"] = list(b.notes)
    return {**extra,
        "format": FORMAT, "escrow_id": b.escrow_id, "protocol_version": b.protocol_version, "creator": b.creator,
        "amount": b.amount,
        "group": [{"slot": h.slot, "address": h.address, "warm_keys": list(h.warm_keys),
                   **({} if h.grants == "exact" else {"grants": h.grants})} for h in b.group],
        "config": {**{name: getattr(b.config, name) for name in CONFIG_FIELDS},
                   **{name: getattr(b.config, name) for name in CONFIG_OPTIONAL if getattr(b.config, name) is not None}},
        "diffs": [{"nonce": d.nonce, "content": _b64(d.content), "user_sig": _b64(d.user_sig)} for d in b.diffs],
        "settlement": settlement,
        "penalties": [{"rule": p.rule, "inference_id": p.inference_id, "status": p.status, "numbers": p.numbers,
                       "sum": list(p.sum), "compare": p.compare, "against": p.against, "holds": p.holds,
                       "limit_source": p.limit_source} for p in b.penalties],
    }


class _Reader:
    """Typed access to one JSON object, every error naming the file and the path inside it."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, path: str, problem: str) -> BundleError:
        return BundleError(f"{self.where}: {path}: {problem}")

    def obj(self, value: Any, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, found {type(value).__name__}")
        unknown = sorted(set(value) - set(required) - set(optional))
        if unknown:
            raise self.fail(path, f"unknown key {unknown[0][:MAX_TEXT]!r}")
        missing = [k for k in required if k not in value]
        if missing:
            raise self.fail(path, f"missing key {missing[0]!r}")
        return value

    def as_int(self, value: Any, path: str, nullable: bool = False) -> int | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, found {type(value).__name__}")
        if not 0 <= value <= U64:
            raise self.fail(path, "integer outside 0 .. 2^64-1")
        return value

    def as_text(self, value: Any, path: str, nullable: bool = False, limit: int = MAX_TEXT) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, found {type(value).__name__}")
        if len(value) > limit or not value.isprintable():
            raise self.fail(path, f"a string of at most {limit} printable characters is expected")
        return value

    def as_bytes(self, value: Any, path: str) -> bytes:
        if not isinstance(value, str):
            raise self.fail(path, f"expected base64 text, found {type(value).__name__}")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise self.fail(path, "not valid base64") from None

    def as_list(self, value: Any, path: str, limit: int | None = None) -> list:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, found {type(value).__name__}")
        if limit is not None and len(value) > limit:
            raise self.fail(path, f"more than {limit} entries")
        return value


def _refuse_float(text: str):
    raise BundleError(f"non-integer number {text[:40]!r}: chain numbers are integers")


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    """An object whose key appears twice is refused: JSON readers disagree on which value counts (Python's and jq
    take the last, others the first), so a reader and this verifier could see two different bundles."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise BundleError(f"key {k[:MAX_TEXT]!r} appears twice in one object")
        out[k] = v
    return out


def parse_bundle(data: bytes, where: str = "bundle") -> Bundle:
    """Read a bundle document (:class:`BundleError` naming ``where`` and the JSON path when it is unusable)."""
    if len(data) > MAX_BUNDLE_BYTES:
        raise BundleError(f"{where}: {len(data)} bytes, more than the {MAX_BUNDLE_BYTES} a bundle may have")
    try:
        doc = json.loads(data, parse_float=_refuse_float, parse_constant=_refuse_float,
                         object_pairs_hook=_refuse_duplicates)
    except BundleError as exc:
        raise BundleError(f"{where}: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise BundleError(f"{where}: not a JSON document ({str(exc).splitlines()[0][:200]})") from None
    r = _Reader(where)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise BundleError(f"{where}: format {str(found)[:80]!r} is not {FORMAT!r}")
    doc = r.obj(doc, "$", ("format", "escrow_id", "protocol_version", "creator", "amount", "group", "config",
                           "diffs"), ("settlement", "penalties", "settlement_missing", "notes"))
    group = []
    for i, h in enumerate(r.as_list(doc["group"], "group", MAX_SLOTS)):
        path = f"group[{i}]"
        h = r.obj(h, path, ("slot", "address"), ("warm_keys", "grants"))
        grants = r.as_text(h.get("grants", "exact"), path + ".grants")
        if grants not in GRANTS:
            raise r.fail(path + ".grants", f"one of {', '.join(GRANTS)} is expected")
        if r.as_int(h["slot"], path + ".slot") != i:
            raise r.fail(path + ".slot", f"slots must be listed in order 0 .. n-1, found {h['slot']} at position {i}")
        warm = tuple(r.as_text(k, f"{path}.warm_keys[{j}]")
                     for j, k in enumerate(r.as_list(h.get("warm_keys", []), path + ".warm_keys", MAX_SLOTS)))
        group.append(Host(i, r.as_text(h["address"], path + ".address"), warm, grants))
    config = r.obj(doc["config"], "config", CONFIG_FIELDS, CONFIG_OPTIONAL)
    diffs = []
    for i, d in enumerate(r.as_list(doc["diffs"], "diffs")):
        path = f"diffs[{i}]"
        d = r.obj(d, path, ("nonce", "content", "user_sig"))
        diffs.append(SignedDiff(r.as_int(d["nonce"], path + ".nonce"), r.as_bytes(d["content"], path + ".content"),
                                r.as_bytes(d["user_sig"], path + ".user_sig")))
    return Bundle(
        escrow_id=r.as_text(doc["escrow_id"], "escrow_id"),
        protocol_version=r.as_text(doc["protocol_version"], "protocol_version"),
        creator=r.as_text(doc["creator"], "creator"), amount=r.as_int(doc["amount"], "amount"), group=tuple(group),
        config=apply.Config(**{"seal_grace_nonces": None,
                               **{k: r.as_int(config[k], "config." + k) for k in CONFIG_FIELDS},
                               **{k: r.as_int(config[k], "config." + k) for k in CONFIG_OPTIONAL if k in config}}),
        diffs=tuple(diffs),
        settlement=_settlement(r, doc.get("settlement")),
        penalties=tuple(_penalty(r, p, f"penalties[{i}]")
                        for i, p in enumerate(r.as_list(doc.get("penalties", []), "penalties"))),
        settlement_missing=_missing(r, doc.get("settlement_missing"), doc.get("settlement")),
        notes=tuple(r.as_text(n, f"notes[{i}]", limit=MAX_NOTE)
                    for i, n in enumerate(r.as_list(doc.get("notes", []), "notes", 64))))


def _missing(r: _Reader, value: Any, settlement: Any) -> SettlementMissing | None:
    if value is None:
        return None
    if settlement is not None:
        raise r.fail("settlement_missing", "given beside a settlement")
    m = r.obj(value, "settlement_missing", ("reason", "fails"))
    if not isinstance(m["fails"], bool):
        raise r.fail("settlement_missing.fails", "expected true or false")
    return SettlementMissing(r.as_text(m["reason"], "settlement_missing.reason", limit=MAX_NOTE), m["fails"])


def _settlement(r: _Reader, value: Any) -> Settlement | None:
    if value is None:
        return None
    s = r.obj(value, "settlement", ("msg", "max_nonce"), ("tx_hash", "height", "approved_versions", "tx_raw",
                                                          "read_from"))
    versions = tuple(r.as_text(v, f"settlement.approved_versions[{i}]")
                     for i, v in enumerate(r.as_list(s.get("approved_versions", []), "settlement.approved_versions",
                                                  MAX_SLOTS)))
    return Settlement(msg=r.as_bytes(s["msg"], "settlement.msg"),
                      max_nonce=r.as_int(s["max_nonce"], "settlement.max_nonce"), approved_versions=versions,
                      tx_hash=r.as_text(s.get("tx_hash"), "settlement.tx_hash", True),
                      height=r.as_int(s.get("height"), "settlement.height", True),
                      tx_raw=None if s.get("tx_raw") is None else r.as_bytes(s["tx_raw"], "settlement.tx_raw"),
                      read_from=r.as_text(s.get("read_from"), "settlement.read_from", True, MAX_NOTE))


def _penalty(r: _Reader, value: Any, path: str) -> Penalty:
    p = r.obj(value, path, ("rule", "inference_id", "status", "numbers", "sum", "compare", "against", "holds"),
              ("limit_source",))
    if not isinstance(p["numbers"], dict) or len(p["numbers"]) > 64:
        raise r.fail(path + ".numbers", "expected an object of at most 64 named integers")
    numbers = {r.as_text(k, path + ".numbers"): r.as_int(v, f"{path}.numbers.{k}") for k, v in p["numbers"].items()}
    terms = tuple(r.as_text(t, f"{path}.sum[{i}]") for i, t in enumerate(r.as_list(p["sum"], path + ".sum", 64)))
    against = r.as_text(p["against"], path + ".against")
    for name, where in [*((t, f"{path}.sum[{i}]") for i, t in enumerate(terms)), (against, path + ".against")]:
        if name not in numbers:
            raise r.fail(where, f"{name!r} is not one of the numbers")
    if not terms:
        raise r.fail(path + ".sum", "names at least one number")
    if p["compare"] not in COMPARISONS:
        raise r.fail(path + ".compare", f"one of {', '.join(COMPARISONS)} is expected")
    if not isinstance(p["holds"], bool):
        raise r.fail(path + ".holds", "expected true or false")
    source = r.obj(p.get("limit_source", {}), path + ".limit_source", (), ("parameter", "epoch", "height", "source"))
    source = {k: (r.as_int(v, f"{path}.limit_source.{k}", True) if k in ("epoch", "height")
                  else r.as_text(v, f"{path}.limit_source.{k}", True)) for k, v in source.items()}
    return Penalty(rule=r.as_text(p["rule"], path + ".rule"),
                   inference_id=r.as_int(p["inference_id"], path + ".inference_id"),
                   status=r.as_text(p["status"], path + ".status"), numbers=numbers, sum=terms, compare=p["compare"],
                   against=against, holds=p["holds"], limit_source=source)


def load_bundle(path: str) -> Bundle:
    """Read and parse the bundle file at ``path``, never reading more than :data:`MAX_BUNDLE_BYTES` + 1 bytes."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_BUNDLE_BYTES:
                raise BundleError(f"{path}: {size} bytes, more than the {MAX_BUNDLE_BYTES} a bundle may have")
            data = fh.read(MAX_BUNDLE_BYTES + 1)
    except OSError as exc:
        raise BundleError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_bundle(data, path)

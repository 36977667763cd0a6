"""Devshard diffs: protobuf DiffContent / DevshardTx, and the host's JSON diff-log entries.

A host answers ``GET …/sessions/{id}/diffs`` with ``[{"diff":{nonce, txs, user_sig[, post_state_root]},
"state_hash"}]``: gonka-ai/gonka devshard/transport/types.go @ 09473fe1 (``DiffJSON``, ``DiffToJSON``; the entry
type ``diffRecordJSON`` is in devshard/transport/server.go)
serialises a diff's txs "as a DiffContent proto (nonce + txs together) to preserve the exact bytes that were
signed", and Go's encoding/json writes that ``[]byte`` (and ``user_sig``, ``state_hash``) in standard base64, a
``uint64`` nonce as a JSON number, ``post_state_root`` only when set (omitempty). So ``txs`` is one base64 string
of ``DiffContent{nonce, repeated DevshardTx txs, escrow_id, post_state_root, sealed_inference_ids}`` whose nonce is
the entry's; the root a host computed after the diff is ``state_hash``. The content's bytes are kept as
``raw_content`` (what the user signed).

Readings of an entry: :func:`diff_from_host_json` gives txs as dicts (the devnet, tests, tools);
:func:`diff_messages_from_host_json` gives them as the version's protobuf ``DevshardTx`` objects, which the
normalizer reads directly; :func:`diff_contents_from_host_json` reads a run of entries for the poller's decode, with
the same checks, keeping only the parsed content (:mod:`indexer.wire.txlines` writes its lines).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence  # not typing.Mapping: its isinstance costs ~1.5 µs, per diff and tx
from typing import Any, NamedTuple

from indexer.wire.protobuf import WireDecodeError, encode_varint, parse, to_dict
from indexer.wire.schemas import schema_for


def decode_tx(data: bytes, version: str | None) -> dict[str, Any]:
    """Decode one ``DevshardTx`` with the proto of the escrow's protocol version."""
    return schema_for(version).decode("DevshardTx", data)


def encode_tx(tx: Mapping[str, Any], version: str | None) -> bytes:
    return schema_for(version).encode("DevshardTx", tx)


def decode_diff(data: bytes, version: str | None) -> dict[str, Any]:
    """Decode a serialized ``DiffContent`` (what the user signs)."""
    return schema_for(version).decode("DiffContent", data)


def encode_diff(diff: Mapping[str, Any], version: str | None) -> bytes:
    return schema_for(version).encode("DiffContent", diff)


def b64decode(value: Any, what: str, *where: Any) -> bytes:
    """Strict standard base64 as Go emits it; anything else is a wire error, not a crash. The error names ``what``
    followed by ``where`` (joined only then: per diff and field, the label cost more than the decode)."""
    if value is None or value == "":
        return b""
    if not isinstance(value, str):
        raise WireDecodeError(f"{_named(what, where)}: expected a base64 string, got {type(value).__name__}")
    try:
        # strict_mode: the same strictness as b64decode(validate=True) without its per-call regex
        return binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError):
        raise WireDecodeError(f"{_named(what, where)}: invalid base64") from None


def _named(what: str, where: tuple) -> str:
    return " ".join([what, *map(str, where)])


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _as_int(value: Any, what: str) -> int:
    # Go JSON gives numbers; tolerate decimal strings (some proxies stringify u64)
    if isinstance(value, bool):
        raise WireDecodeError(f"{what}: expected an integer, got bool")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise WireDecodeError(f"{what}: expected an integer, got {value!r}")


def diff_header_from_host_json(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The cheap part of :func:`diff_from_host_json`: ``{nonce, entry}`` without decoding the txs, enough to check a
    page's contiguity. The state roots are read from the entry by :func:`state_root`, for the one diff of a run that
    is compared between hosts (the decode of the whole entry checks every diff's)."""
    _check_entry(entry, None)
    return {"nonce": _as_int(entry["diff"].get("nonce"), "diff.nonce"), "entry": entry}


def state_root(diff: Mapping[str, Any]) -> bytes:
    """The state root after a diff, to compare between hosts: the signed ``post_state_root`` when the host sends
    it, else ``state_hash``, the root the host computed (the former is omitempty, and versions of DiffToJSON that
    do not copy it leave it out). ``diff`` is a decoded diff or a header (:func:`diff_header_from_host_json`)."""
    if "state_hash" in diff:
        return diff["post_state_root"] or diff["state_hash"]
    entry, nonce = diff["entry"], diff["nonce"]
    return (b64decode(entry["diff"].get("post_state_root"), "diff", nonce, "post_state_root")
            or b64decode(entry.get("state_hash"), "diff", nonce, "state_hash"))


def diff_from_host_json(entry: Mapping[str, Any], version: str | None) -> dict[str, Any]:
    """One host diff-log entry → ``{nonce, txs, escrow_id, post_state_root, sealed_inference_ids,
    user_sig, state_hash, raw_content}`` with txs decoded (dicts) and all byte fields as ``bytes``."""
    _check_entry(entry, None)
    schema = schema_for(version)  # an unknown version fails here, even for a diff without txs
    return _diff(entry, "diff", schema, lambda content: to_dict(schema, "DevshardTx", content))


def diff_messages_from_host_json(entry: Mapping[str, Any], version: str | None,
                                 escrow_id: str | None = None) -> dict[str, Any]:
    """:func:`diff_from_host_json` with ``txs`` as parsed ``DevshardTx`` message objects (unknown fields kept).

    A malformed tx is a :class:`WireDecodeError` naming the escrow, the nonce and the tx's index; an unknown version
    an :class:`~indexer.wire.schemas.UnknownProtocolVersion` naming the escrow."""
    _check_entry(entry, escrow_id)
    return _diff(entry, f"escrow {escrow_id or '?'} diff", schema_for(version, escrow=escrow_id), None)


def _check_entry(entry: Any, escrow_id: str | None) -> None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("diff"), Mapping):
        where = f"escrow {escrow_id}: " if escrow_id else ""
        raise WireDecodeError(f"{where}diff entry: expected an object with a 'diff' object")


def diff_contents_from_host_json(entries: Sequence[Any], version: str | None,
                                 escrow_id: str | None = None) -> list[tuple[int, Any, str, Signed]]:
    """The poller's reading of a run of entries: ``(nonce, parsed DiffContent, escrow id, Signed)`` each, with every
    check of :func:`diff_messages_from_host_json` and the same errors. The txs are ``content.txs``, read where they
    are; :class:`Signed` keeps what verification needs of the entry as served."""
    schema = schema_for(version, escrow=escrow_id)
    label = f"escrow {escrow_id or '?'} diff"
    out = []
    for entry in entries:
        _check_entry(entry, escrow_id)
        nonce, content, raw = _content(entry, label, schema)
        served_root, user_sig, state_hash = _signed(entry, label, nonce)
        out.append((nonce, content, content.escrow_id or str(entry["diff"].get("escrow_id") or ""),
                    Signed(entry["diff"].get("txs") or "", raw, content.post_state_root or served_root, user_sig,
                           state_hash, signs_whole(content.escrow_id, content.post_state_root,
                                                   content.sealed_inference_ids))))
    return out


class Signed(NamedTuple):
    """One served diff as the user signed it. ``content`` is the entry's base64 ``txs`` string exactly as served
    (checked as strict base64 and parsed, never re-encoded), ``raw`` its bytes. ``post_state_root`` is the root the
    user signed: the content's own field 4 when it carries one, else the entry's ``post_state_root`` (DiffToJSON
    serves ``DiffContent{nonce, txs}`` and the root beside it); ``state_hash`` the root the serving host computed.
    ``whole``: the served content carries fields past ``txs``, so it is the signed message itself."""
    content: str
    raw: bytes
    post_state_root: bytes
    user_sig: bytes
    state_hash: bytes
    whole: bool

    def signed_bytes(self, escrow_id: str) -> bytes:
        """The bytes the user signed (:func:`user_signed_bytes`)."""
        return self.raw if self.whole else user_signed_bytes(self.raw, escrow_id, self.post_state_root)


def signed_diff_record(escrow_id: str, nonce: int, content: str, user_sig: bytes, post_state_root: bytes,
                       state_hash: bytes, source_host: str | None) -> dict[str, Any]:
    """The ``signed_diff`` record of one served diff (interface.md §2): ``content`` the served base64 DiffContent
    string itself, the byte fields as lowercase hex, null where the entry has none. The poller writes the same line
    from a template (:meth:`indexer.wire.txlines.TxLines.signed`)."""
    return {"kind": "signed_diff", "escrow_id": escrow_id, "nonce": nonce, "content": content,
            "user_sig": user_sig.hex() or None, "post_state_root": post_state_root.hex() or None,
            "state_hash": state_hash.hex() or None, "source_host": source_host}


def signs_whole(escrow_id: Any, post_state_root: Any, sealed_inference_ids: Any) -> bool:
    """Whether served ``DiffContent`` is the message the user signed as it is: it carries a field past ``txs``
    (escrow_id, post_state_root or sealed_inference_ids). ``DiffToJSON`` serves ``DiffContent{nonce, txs}`` only,
    which the user signed with fields 3 and 4 appended (:func:`user_signed_bytes`). The poller and the verification
    stage both decide with this one test."""
    return bool(escrow_id or post_state_root or sealed_inference_ids)


def user_signed_bytes(served: bytes, escrow_id: str, post_state_root: bytes) -> bytes:
    """The ``DiffContent`` a user signs (``BuildDiffContent``: nonce, txs, escrow_id, post_state_root) from the served
    ``DiffContent{nonce, txs}`` bytes: fields 3 and 4 follow in number order, as the deterministic marshal of the
    whole message writes them (gonka-ai/gonka devshard/transport/types.go ``DiffToJSON`` serves the first two
    fields; gonka-devshard.md §4.8). Fields left at their default are not written, as proto3 leaves them out."""
    out = served
    if escrow_id:
        data = escrow_id.encode("utf-8")
        out += b"\x1a" + encode_varint(len(data)) + data
    if post_state_root:
        out += b"\x22" + encode_varint(len(post_state_root)) + post_state_root
    return out


def _signed(entry: Mapping[str, Any], label: str, nonce: int) -> tuple[bytes, bytes, bytes]:
    """(post_state_root, user_sig, state_hash) of an entry as sent, each checked as strict base64."""
    diff = entry["diff"]
    return (b64decode(diff.get("post_state_root"), label, nonce, "post_state_root"),
            b64decode(diff.get("user_sig"), label, nonce, "user_sig"),
            b64decode(entry.get("state_hash"), label, nonce, "state_hash"))


def _content(entry: Mapping[str, Any], label: str, schema) -> tuple[int, Any, bytes]:
    """(nonce, parsed DiffContent, its bytes) of a checked entry; errors name ``label``, the nonce and the field."""
    diff = entry["diff"]
    nonce = _as_int(diff.get("nonce"), "diff.nonce")
    encoded = diff.get("txs")
    if isinstance(encoded, list):
        raise WireDecodeError(f"{label} {nonce} txs: a JSON list; a host sends one base64 DiffContent (DiffToJSON)")
    raw = b64decode(encoded, label, nonce, "txs")
    try:
        content = parse(schema, "DiffContent", raw)
    except WireDecodeError as exc:  # "in txs[i]: why" names the tx at fault
        raise WireDecodeError(f"{label} {nonce} {str(exc).removeprefix('in ')}") from None
    if content.nonce != nonce:
        raise WireDecodeError(f"{label} {nonce}: its DiffContent holds nonce {content.nonce}")
    return nonce, content, raw


def _diff(entry: Mapping[str, Any], label: str, schema, tx_form) -> dict[str, Any]:
    """The fields of a checked diff entry, its DiffContent parsed by the library and each tx given as
    ``tx_form(message)`` (None: the message itself); errors name ``label``, the nonce and the field."""
    nonce, content, raw = _content(entry, label, schema)
    txs = list(content.txs) if tx_form is None else [tx_form(tx) for tx in content.txs]
    post_state_root, user_sig, state_hash = _signed(entry, label, nonce)
    return {
        "nonce": nonce,
        "txs": txs,
        "escrow_id": content.escrow_id or str(entry["diff"].get("escrow_id") or ""),
        "post_state_root": post_state_root or content.post_state_root,
        "sealed_inference_ids": list(content.sealed_inference_ids),
        "user_sig": user_sig,
        "state_hash": state_hash,
        "raw_content": raw,
    }


def diff_to_host_json(
    diff: Mapping[str, Any], version: str | None, user_sig: bytes, state_hash: bytes
) -> dict[str, Any]:
    """A host's JSON entry for ``diff``, as ``DiffToJSON`` writes it (used by the devnet host): the DiffContent
    of its nonce and txs, the user's signature, the signed root when there is one (omitempty), and the host's root
    after the diff as ``state_hash``."""
    content = encode_diff({"nonce": diff["nonce"], "txs": diff.get("txs", [])}, version)
    body = {"nonce": diff["nonce"], "txs": b64encode(content), "user_sig": b64encode(user_sig)}
    if diff.get("post_state_root"):
        body["post_state_root"] = b64encode(diff["post_state_root"])
    return {"diff": body, "state_hash": b64encode(state_hash)}

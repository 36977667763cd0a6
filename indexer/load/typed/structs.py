"""The file load's try at a line the block typer (native.py) declined: msgspec decodes, checks and types it
in C, one Struct per kind (a non-ASCII model name, say, which the block typer leaves to Python).

For the bulk tx kinds (start, confirm_start, finish, validation, validation_vote: 97 % of a mainnet file) a
canonical line is decoded straight into a Struct whose field types carry the same bounds as the fast path's checks
(indexer.load.typed.fastpath), and a generated function checks its hex fields (coerce.NON_HEX, cheaper than a msgspec
pattern) and writes its COPY line. That is ~2.5 µs a line cheaper than parsing into a dict and checking every field
in Python (bench/ingest_bench.py), and renders the same text.

A line is taken here only when nothing about it needs a decision: no backslash (so no string needs COPY escaping and
none can hold \\u0000), and exactly one colon per field the Struct holds, so the line names no unknown field, no
field twice, no explicit null and no colon inside a string. Anything else (or anything msgspec refuses: a float, an
integer out of range, an id given as a number; a hash that is not hex; a refusal; another kind) returns None and the
line goes down the fast path and then the general path exactly as before, which give the precise reasons.
tests/load/test_fastpath.py holds the three renders to the same text.
"""
from __future__ import annotations

from typing import Annotated, Union

import msgspec

from indexer.load.typed.coerce import HEX_BYTES, MAX_I31, MAX_I63, NON_HEX
from indexer.load.typed.fastpath import DECIMAL_DIGITS, REFUSAL, RENDER as FAST_RENDER, ZERO, decimal_pattern
from indexer.records import BOOL, HEX, I64, ID, KINDS, STR, U32, U64, Kind

_TYPES = {
    ID: Annotated[str, msgspec.Meta(min_length=1, max_length=128)],  # an integer id takes the fast path
    U64: Annotated[int, msgspec.Meta(ge=0, le=MAX_I63)],
    I64: Annotated[int, msgspec.Meta(ge=-MAX_I63, le=MAX_I63)],
    U32: Annotated[int, msgspec.Meta(ge=0, le=MAX_I31)],
    BOOL: bool,
    STR: str,
    HEX: str,  # checked by the render (coerce.NON_HEX): a msgspec pattern runs a regex, ~0.5 µs a hash
}
# the fast path's renders, without COPY escaping: a line with a backslash never reaches a Struct
_RENDER = {t: FAST_RENDER[t].replace("esc(", "(") for t in _TYPES}
STRUCT_KINDS = ("start", "confirm_start", "finish", "validation", "validation_vote")


def _field_type(kind: Kind, f):
    typ = _TYPES[f.type]
    if f.type in (STR, HEX) and f.max_len:  # past the bound: the general path names it (coerce.within)
        typ = Annotated[str, msgspec.Meta(max_length=f.max_len)]
    if f.type in DECIMAL_DIGITS and f.name not in kind.key and f.name not in kind.slot_fields:
        # a canonical decimal string, as the fast path takes it
        typ = Union[typ, Annotated[str, msgspec.Meta(pattern=decimal_pattern(DECIMAL_DIGITS[f.type]))]]
    return typ if f.required else typ | None


def _compile(kind: Kind):
    """(Struct class, render(values, line_number, source_id_text) -> (copy_line, scope, slot, key) or None)."""
    struct = msgspec.defstruct(
        f"{kind.name.title().replace('_', '')}Line",
        [(f.name, _field_type(kind, f)) if f.required else (f.name, _field_type(kind, f), None)
         for f in kind.fields],
        tag=kind.name, tag_field="kind", kw_only=True)  # kw_only: the fields keep the table's order
    at = {f.name: f"v{i}" for i, f in enumerate(kind.fields)}
    cells = ["{n}"]
    for i, f in enumerate(kind.fields):
        expr = _RENDER[f.type].format(v=f"v{i}")
        cells.append("{" + (expr if f.required else f"NULL if v{i} is None else {expr}") + "}")
    cells += ["{NULL}", "{sid}"]  # extra (no unknown field reaches here), source_id
    guard = "".join(f"    if {'' if f.required else at[f.name] + ' is not None and '}"
                    f"{NON_HEX.format(v=at[f.name])}:\n        return None\n" for f in kind.fields if f.type == HEX)
    if kind.name == "finish":  # a refusal: the general path parses it
        guard += f"    if {REFUSAL.format(**at)}:\n        return None\n"
    slot = at[kind.slot_fields[0]] if kind.slot_fields else "None"
    line = "\\t".join(cells) + "\\n"
    src = (f"def render(values, n, sid):\n    {', '.join(at.values())}, = values\n{guard}"
           f"    return (f\"{line}\", {at['escrow_id']}, {slot}, "
           f"({''.join(at[k] + ', ' for k in kind.key)}))\n")
    namespace = {"NULL": "\\N", "ZERO": ZERO, "HEX_BYTES": HEX_BYTES}
    exec(src, namespace)  # noqa: S102 - generated from the static field table in records.py
    namespace["render"].source = src
    return struct, namespace["render"]


_COMPILED = {name: _compile(KINDS[name]) for name in STRUCT_KINDS}
_DECODE = msgspec.json.Decoder(Union[tuple(struct for struct, _ in _COMPILED.values())]).decode
_BY_STRUCT = {struct: (name, render, len(struct.__struct_fields__) + 1) for name, (struct, render) in _COMPILED.items()}
_astuple = msgspec.structs.astuple
_Refused = (msgspec.DecodeError, msgspec.ValidationError)


def typed_line(raw: bytes, number: int, sid: str):
    """(kind, (copy_line, scope, slot, key)) of a canonical bulk-kind line, or None (the caller's paths decide)."""
    # find, not `in`: bytes.__contains__ first tries a bytes needle as an int and clears the error (0.24 µs a
    # line against 0.11)
    if raw.find(b"\\") >= 0:
        return None
    try:
        record = _DECODE(raw)
    except _Refused:
        return None
    kind, render, keys = _BY_STRUCT[record.__class__]
    values = _astuple(record)
    # every key brings one colon: equal counts mean the Struct's non-null fields and `kind` are all the line holds
    if raw.count(b":") != keys - values.count(None):
        return None
    got = render(values, number, sid)
    return None if got is None else (kind, got)

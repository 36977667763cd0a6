"""The common case of a record, typed and rendered in one generated function per kind.

Most lines are ordinary: every known field has its plain JSON type, unknown fields (if any) are plain scalars, and no array,
timestamp or vote field needs work. For those, one function checks the fields and writes the COPY text line
directly (no intermediate row, no second pass). Anything else returns None and takes the general path
(indexer.load.coerce + indexer.load.copytext), which gives the precise reason for a bad field. Both paths render
the same text; tests/test_fastpath.py holds them to it.
"""
from __future__ import annotations

import orjson

from indexer.load.coerce import HEX_DIGITS, MAX_I31, MAX_I63, MAX_U64
from indexer.load.copytext import text
from indexer.records import BOOL, HEX, I64, ID, KINDS, REASON, STR, U32, U64, U64N, VOTES, Kind

_CHECK = {
    ID: "((type({v}) is str and 0 < len({v}) <= 128) or (type({v}) is int and 0 <= {v} <= MAX_U64))",
    U64: "(type({v}) is int and 0 <= {v} <= MAX_I63)",
    U64N: "(type({v}) is int and 0 <= {v} <= MAX_U64)",
    I64: "(type({v}) is int and -MAX_I63 <= {v} <= MAX_I63)",
    U32: "(type({v}) is int and 0 <= {v} <= MAX_I31)",
    BOOL: "(type({v}) is bool)",
    STR: "(type({v}) is str)",
    HEX: "(type({v}) is str and HEXM({v}))",
}
_SCALARS = (str, int, bool, type(None))
_RENDER = {  # the COPY text of a non-null, checked value (an f-string replacement field)
    ID: "esc({v})", STR: "esc({v})", HEX: "{v}.lower()",
    U64: "{v}", U64N: "{v}", I64: "{v}", U32: "{v}", BOOL: "('t' if {v} else 'f')",
}


def _votes_text(v):
    """The COPY text of a vote list as the general path writes it ([{voter_slot, accept}], other keys dropped), for
    votes of plain types; None sends the record to the general path (decimal-string slots, bad votes)."""
    if type(v) is not list:
        return None
    out = []
    for e in v:
        if type(e) is not dict:
            return None
        slot, accept = e.get("voter_slot"), e.get("accept")
        if type(accept) is not bool or type(slot) is not int or not 0 <= slot <= MAX_I31:
            return None
        out.append({"voter_slot": slot, "accept": accept})
    return text(orjson.dumps(out).decode())


def _reason_text(v):
    """A timeout reason already in its stored form; any other spelling is the general path's to map."""
    return v if v == "refused" or v == "execution" else None


# required field types rendered by a helper that also checks them
_DERIVED = {VOTES: "VOTES_TEXT", REASON: "REASON_TEXT"}


def _compile(kind: Kind):
    """fast(obj, line_number, source_id_text) -> (copy_line, scope_value, slot_value) or None."""
    if any(f.type not in _CHECK and f.type not in _DERIVED for f in kind.fields if f.required):
        return None  # a required array / timestamp field: every record needs the general path
    gets, conds, normalise, cells = [], [], [], ["{n}"]
    for i, f in enumerate(kind.fields):
        v = f"v{i}"
        gets.append(f"    {v} = g({f.name!r})")
        if f.type in _DERIVED and f.required:  # its COPY text, or None when the general path must judge it
            conds.append(f"({v}t := {_DERIVED[f.type]}({v})) is not None")
            cells.append("{" + v + "t}")
            continue
        if f.type not in _CHECK:  # an optional field of a general-path type: only its absence is common
            conds.append(f"{v} is None")
            cells.append("{NULL}")
            continue
        check = _CHECK[f.type].format(v=v)
        conds.append(check if f.required else f"({v} is None or {check})")
        if f.type == ID:  # an integer id is stored (and marks its scope) as its decimal text
            normalise.append(f"    {v} = {v} if type({v}) is str else str({v})")
        expr = _RENDER[f.type].format(v=v)
        cells.append("{" + (expr if f.required else f"NULL if {v} is None else {expr}") + "}")
    at = {f.name: f"v{i}" for i, f in enumerate(kind.fields)}
    if kind.name == "finish":  # a 0/0 Finish with a payload is a refusal to parse: the general path does that
        conds.append(f"not ({at['input_tokens']} == 0 and {at['output_tokens']} == 0 and {at['response_payload']})")
    cells += ["{x}", "{sid}"]  # extra (unknown fields of plain scalars, as the general path writes them), source_id
    scope = at["escrow_id" if kind.scope == "escrow" else "epoch_index"]
    slot = at[kind.slot_fields[0]] if kind.slot_fields else "None"
    if kind.slot_fields and kind.field(kind.slot_fields[0]).type == VOTES:  # the highest voter slot
        slot = f"max([e['voter_slot'] for e in {slot}], default=None)"
    line = "\\t".join(cells) + "\\n"
    src = "\n".join([
        "def fast(obj, n, sid):", "    g = obj.get", *gets,
        f"    if not ({' and '.join(conds)}):", "        return None",
        # unknown fields: a newer protocol's scalar (served_hash) stays on this path; anything nested, a float
        # (maybe a rounded big integer) or an integer beyond 64 bits is left to the general path
        "    if obj.keys() <= KNOWN:", "        x = NULL", "    else:",
        "        x = {k: v for k, v in obj.items() if k not in KNOWN}",
        "        if not all(type(v) in SCALAR and (type(v) is not int or -MAX_I63 - 1 <= v <= MAX_U64)",
        "                   for v in x.values()):", "            return None",
        "        try:", "            x = esc(dumps(x).decode())",
        "        except TypeError:", "            return None", *normalise,
        f'    return (f"{line}", {scope}, {slot})'])
    namespace = {"MAX_U64": MAX_U64, "MAX_I63": MAX_I63, "MAX_I31": MAX_I31, "HEXM": HEX_DIGITS.match, "esc": text,
                 "NULL": "\\N", "KNOWN": frozenset(["kind", *kind.columns]), "SCALAR": _SCALARS,
                 "dumps": orjson.dumps, "VOTES_TEXT": _votes_text, "REASON_TEXT": _reason_text}
    exec(src, namespace)  # noqa: S102 - generated from the static field table in kinds.py
    namespace["fast"].source = src
    return namespace["fast"]


FAST = {name: fn for name, kind in KINDS.items() if (fn := _compile(kind)) is not None}

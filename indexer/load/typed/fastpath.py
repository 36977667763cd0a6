"""The common case of a record, typed and rendered in one generated function per kind.

Most lines are ordinary: every known field has its plain JSON type, unknown fields (if any) are plain scalars, and no array or
timestamp field needs work (vote lists of plain votes are normalised here too). For those, one function checks the fields and writes the COPY text line
directly (no intermediate row, no second pass). Anything else returns None and takes the general path
(coerce.py + copytext.py), which gives the precise reason for a bad field. Both paths render
the same text; tests/load/test_fastpath.py holds them to it.
"""
from __future__ import annotations

import re

import orjson

from indexer.load.typed.coerce import HEX_BYTES, MAX_I31, MAX_I63, MAX_U64, NON_HEX, c_reason
from indexer.load.typed.copytext import text
from indexer.records import BOOL, HEX, I64, ID, KINDS, REASON, STR, U32, U64, U64N, VOTES, Kind

_CHECK = {
    ID: "((type({v}) is str and 0 < len({v}) <= 128) or (type({v}) is int and 0 <= {v} <= MAX_U64))",
    U64: "(type({v}) is int and 0 <= {v} <= MAX_I63)",
    U64N: "(type({v}) is int and 0 <= {v} <= MAX_U64)",
    I64: "(type({v}) is int and -MAX_I63 <= {v} <= MAX_I63)",
    U32: "(type({v}) is int and 0 <= {v} <= MAX_I31)",
    BOOL: "(type({v}) is bool)",
    STR: "(type({v}) is str)",
    HEX: "(type({v}) is str and not " + NON_HEX + ")",
    # computed values (walrus): the normalised vote list and its highest slot; the stored reason
    VOTES: "(type({v}) is list and (w{v} := VOTE_LIST({v})) is not None)",
    REASON: "(type({v}) is str and (r{v} := REASONS.get({v})) is not None)",
}
# A decimal string is accepted where the general path takes one (a non-negative integer field) when its text is
# already what the general path writes (no sign, no leading zero) and short enough to be in range whatever its
# digits: 9 digits < 2^31, 18 < 2^63, 19 < 2^64. Key and slot fields keep ints only: their values are compared.
DECIMAL_DIGITS = {U32: 9, U64: 18, U64N: 19}


def decimal_pattern(digits: int) -> str:
    """The canonical decimal text of at most `digits` digits (also the Struct decoder's: indexer.load.typed.structs)."""
    return r"^(?:0|[1-9][0-9]{0,%d})\Z" % (digits - 1)


# A 0/0 Finish with a payload is a refusal to parse, which only the general path does; its token counts may come as
# numbers or as canonical decimal strings. One test for every generated path (here and indexer.load.typed.structs).
ZERO = (0, "0")
REFUSAL = "{input_tokens} in ZERO and {output_tokens} in ZERO and {response_payload}"
_SCALARS = (str, int, bool, type(None))  # unknown fields the fast path keeps (in `extra`)
RENDER = {  # the COPY text of a non-null, checked value (an f-string replacement field)
    ID: "esc({v})", STR: "esc({v})", HEX: "{v}.lower()",
    U64: "{v}", U64N: "{v}", I64: "{v}", U32: "{v}", BOOL: "('t' if {v} else 'f')",
    VOTES: "w{v}[0]", REASON: "r{v}",  # JSON of ints and booleans, a fixed word: nothing to escape
}
# The general path's reason words (coerce.c_reason) for the spellings logs use; any other goes general.
_REASON_WORDS = {spelling: c_reason(spelling, "reason") for spelling in
                 ("refused", "execution", "TIMEOUT_REASON_REFUSED", "TIMEOUT_REASON_EXECUTION")}


def _vote_list(votes: list):
    """(the general path's normalised JSON, highest voter slot or None) of a list of plain votes (an int slot in
    range, a boolean accept), or None: then the general path decides, and names what is wrong."""
    out, top = [], None
    for vote in votes:
        if type(vote) is not dict:
            return None
        slot, accept = vote.get("voter_slot"), vote.get("accept")
        if type(slot) is not int or not 0 <= slot <= MAX_I31 or type(accept) is not bool:
            return None
        out.append({"voter_slot": slot, "accept": accept})
        if top is None or slot > top:
            top = slot
    return orjson.dumps(out).decode(), top


def _compile(kind: Kind, escape: bool = True, keyed: bool = False):
    """fast(obj, line_number, source_id_text) -> (copy_line, scope_value, slot_value) or None. With `escape`
    False, strings are written as they are: only for objects parsed from a line without a backslash (see
    PREPARE_PLAIN). With `keyed`, the tuple ends with the record's key (a tuple of the key columns' values)."""
    if any(f.type not in _CHECK for f in kind.fields if f.required):
        return None  # a required array / vote / timestamp field: every record needs the general path
    gets, conds, normalise, cells, slot_of = [], [], [], ["{n}"], None
    for i, f in enumerate(kind.fields):
        v = f"v{i}"
        gets.append(f"    {v} = g({f.name!r})")
        if f.type not in _CHECK:  # an optional field of a general-path type: only its absence is common
            conds.append(f"{v} is None")
            cells.append("{NULL}")
            continue
        check = _CHECK[f.type].format(v=v)
        if f.type in (STR, HEX) and f.max_len:  # past the bound: the general path names it (coerce.within)
            check = f"({check} and len({v}) <= {f.max_len})"
        if f.type == VOTES and f.max_items:
            check = f"(type({v}) is list and len({v}) <= {f.max_items} and {check})"
        if f.type in DECIMAL_DIGITS and f.name not in kind.key and f.name not in kind.slot_fields:
            check = f"({check} or (type({v}) is str and DEC{DECIMAL_DIGITS[f.type]}({v})))"
        conds.append(check if f.required else f"({v} is None or {check})")
        if f.type == ID:  # an integer id is stored (and marks its scope) as its decimal text
            normalise.append(f"    {v} = {v} if type({v}) is str else str({v})")
        expr = RENDER[f.type].format(v=v)
        if f.type == VOTES and f.name in kind.slot_fields:
            slot_of = f"w{v}[1]"
        if not escape:
            expr = expr.replace("esc(", "(")
        cells.append("{" + (expr if f.required else f"NULL if {v} is None else {expr}") + "}")
    at = {f.name: f"v{i}" for i, f in enumerate(kind.fields)}
    if kind.name == "finish":
        conds.append(f"not ({REFUSAL.format(**at)})")
    cells += ["{x}", "{sid}"]  # extra (unknown fields of plain scalars, as the general path writes them), source_id
    scope = at["escrow_id" if kind.scope == "escrow" else "epoch_index"]
    slot = (slot_of if slot_of else at[kind.slot_fields[0]]) if kind.slot_fields else "None"
    line = "\\t".join(cells) + "\\n"
    key = f", ({''.join(at[k] + ', ' for k in kind.key)})" if keyed else ""
    src = "\n".join([
        "def fast(obj, n, sid):", "    g = obj.get", *gets,
        f"    if not ({' and '.join(conds)}):", "        return None",
        # unknown fields: a newer protocol's scalar (served_hash) stays on this path; anything nested, a float
        # (maybe a rounded big integer) or an integer beyond 64 bits is left to the general path
        "    if obj.keys() <= KNOWN:", "        x = NULL", "    else:",
        "        x = {k: v for k, v in obj.items() if k not in KNOWN}",
        "        if not all(type(v) in SCALAR for v in x.values()):", "            return None",
        "        try:  # orjson refuses an integer beyond 64 bits (TypeError): the general path decides",
        "            x = " + ("esc(dumps(x).decode())" if escape else "dumps(x).decode()"),
        "        except TypeError:", "            return None", *normalise,
        f'    return (f"{line}", {scope}, {slot}{key})'])
    namespace = {"MAX_U64": MAX_U64, "MAX_I63": MAX_I63, "MAX_I31": MAX_I31, "HEX_BYTES": HEX_BYTES, "esc": text,
                 "VOTE_LIST": _vote_list, "REASONS": _REASON_WORDS,
                 **{f"DEC{n}": re.compile(decimal_pattern(n)).match for n in DECIMAL_DIGITS.values()},
                 "NULL": "\\N", "ZERO": ZERO, "KNOWN": frozenset(["kind", *kind.columns]), "SCALAR": _SCALARS,
                 "dumps": orjson.dumps}
    exec(src, namespace)  # noqa: S102 - generated from the static field table in kinds.py
    namespace["fast"].source = src
    return namespace["fast"]


FAST = {name: fn for name, kind in KINDS.items() if (fn := _compile(kind)) is not None}
# For the file load (indexer.load.prepare), the same functions returning the key too (the batch's keys are
# counted from it: cheaper than cutting them out of the text again), with and without COPY escaping. Without
# is for records parsed from a line that holds no backslash: JSON forbids raw control characters inside strings
# (orjson refuses them), so without a backslash escape no string value can hold a tab, newline, carriage return or
# backslash, and `text()` would return every string unchanged (at a cost of ~1.2 µs of ~7 µs a line).
PREPARE_ESCAPING = {name: _compile(KINDS[name], keyed=True) for name in FAST}
PREPARE_PLAIN = {name: _compile(KINDS[name], escape=False, keyed=True) for name in FAST}

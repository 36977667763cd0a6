"""One line typed: the Python paths that define what a line means, tried cheapest first.

``line_typer`` gives the function the file load and the poller call per line (indexer.load.prepare): the Struct
decoder (structs.py) when the caller reads raw lines, then the generated fast path (fastpath.py), then the general
path (coerce.py field by field, copytext.py to render), which names what is wrong with a line it quarantines. Every
path renders the same COPY text (tests/load/test_fastpath.py). The C block typer (native.py) takes the bulk kinds' plain
lines before any of these and hands the rest here.
"""
from __future__ import annotations

from collections.abc import Iterable

import orjson

from indexer import refusals
from indexer.load.typed.coerce import COERCE, Invalid, NeedsExactParse
from indexer.load.typed.copytext import FORMATTERS
from indexer.load.typed.fastpath import PREPARE_ESCAPING, PREPARE_PLAIN
from indexer.records import KINDS, VOTES
from indexer.sources.ndjson import Accepted, classify_line, key_count, loads_exact

# Row positions (line number first) used by the general path.
_SCOPE_AT = {name: 1 + kind.columns.index("escrow_id" if kind.scope == "escrow" else "epoch_index")
             for name, kind in KINDS.items()}
_SLOT_AT = {name: (1 + kind.columns.index(kind.slot_fields[0]), kind.slot_fields[0],
                   kind.field(kind.slot_fields[0]).type == VOTES)
            for name, kind in KINDS.items() if kind.slot_fields}
assert all(len(kind.slot_fields) <= 1 for kind in KINDS.values())  # one slot field per kind (SlotCheck's model)
_NESTED = frozenset(name for name, kind in KINDS.items() if any(f.type == VOTES for f in kind.fields))
_ESCROW_SLOTS_AT = 1 + KINDS["escrow"].columns.index("slots")
_F_IN, _F_OUT, _F_PAYLOAD = (1 + KINDS["finish"].columns.index(c)
                             for c in ("input_tokens", "output_tokens", "response_payload"))


def line_typer(out, emit, source_id: int, loads, first_try):
    """line(number, raw) -> whether the line counts (not blank): types one line, by the Struct decoder
    (``first_try``), the fast path or the general path, and hands its row to ``emit(kind, (copy_line, scope, slot,
    key))``, or quarantines it in ``out`` (a :class:`indexer.load.prepare.Prepared`: its rejects, escrow sizes
    and refusal parses)."""
    sid, fast_plain, fast_escaping = str(source_id), PREPARE_PLAIN, PREPARE_ESCAPING

    def line(number: int, raw: bytes) -> bool:
        if first_try is not None and (typed := first_try(raw, number, sid)) is not None:
            emit(*typed)
            return True
        try:
            obj = loads(raw)
            kind = obj["kind"]
            fast = fast_plain[kind]
        except (ValueError, KeyError, TypeError):
            if not raw.strip():
                return False  # a blank line: numbered, never counted or loaded
            fast = None
        # Each key brings one colon, so a line with more colons than parsed keys (a duplicate key orjson dropped,
        # or a colon inside a string) is left to the general path, which checks. Fast-path records are flat
        # objects, but for their vote lists (_NESTED): those keys are counted too.
        # A line with a backslash may hold escapes: its strings are escaped for COPY, and \u0000 goes general.
        if (fast is not None and ((colons := raw.count(b":")) == len(obj)
                                  or (kind in _NESTED and colons == key_count(obj)))
                and (raw.find(b"\\") < 0 or (raw.find(b"\\u0000") < 0 and (fast := fast_escaping[kind])))
                and (got := fast(obj, number, sid)) is not None):
            emit(kind, got)
        else:
            _general(out, emit, source_id, sid, number, raw)
        return True
    return line


def _general(out, emit, source_id: int, sid: str, number: int, raw: bytes) -> None:
    """Any record the fast path declined: classify, type field by field (precise reasons), render."""
    verdict = classify_line(raw)
    if not isinstance(verdict, Accepted):
        out.rejects.append((source_id, number, verdict.kind, verdict.reason, printable(raw)))
        return
    kind = verdict.kind
    try:
        row = typed_row(kind, verdict.obj, raw, number)
    except Invalid as exc:
        out.rejects.append((source_id, number, kind, str(exc), printable(raw)))
        return
    emit(kind, (FORMATTERS[kind](row, sid), row[_SCOPE_AT[kind]], slot_of(kind, row), row[1:1 + len(KINDS[kind].key)]))
    if kind == "escrow":
        out.escrow_sizes[row[1]] = len(row[_ESCROW_SLOTS_AT])
    elif kind == "finish" and row[_F_IN] == 0 and row[_F_OUT] == 0 and row[_F_PAYLOAD]:
        out.parses.append(refusals.parse_row(row[1], row[2], row[_F_PAYLOAD]))


def typed_row(kind: str, obj: dict, raw: bytes, number: int) -> tuple:
    """(line, *columns, extra) of an accepted record; raises Invalid naming the field."""
    try:
        return (number, *COERCE[kind](obj))
    except NeedsExactParse:
        return (number, *COERCE[kind](loads_exact(raw), exact=True))
    except Invalid:
        # orjson reads an integer past 64 bits as a float: the exact parse names such a value by its digits
        # (rare, and only on a line being refused)
        return (number, *COERCE[kind](loads_exact(raw), exact=True))


def slot_of(kind: str, row: tuple):
    """The highest slot a typed row names (its voters' for a vote list), or None."""
    if kind not in _SLOT_AT:
        return None
    at, _, is_votes = _SLOT_AT[kind]
    value = row[at]
    if not is_votes or value is None:
        return value
    return max((v["voter_slot"] for v in orjson.loads(value)), default=None)


def slot_offenders(lines: Iterable[tuple[int, bytes]], kind: str, sizes: dict[str, int]):
    """Yield (line, raw, reason) for the `kind` records of a batch naming a slot beyond their escrow's size
    (`sizes` holds only the escrows known to be exceeded)."""
    name, is_votes = _SLOT_AT[kind][1:]
    for number, raw in lines:
        verdict = classify_line(raw)
        if not isinstance(verdict, Accepted) or verdict.kind != kind:
            continue
        try:
            row = typed_row(kind, verdict.obj, raw, number)
        except Invalid:
            continue
        size, slot = sizes.get(row[1]), slot_of(kind, row)
        if size is None or slot is None or slot < size:
            continue
        yield number, raw, (f"field {name}: a voter_slot is out of range for escrow with {size} slots" if is_votes
                            else f"field {name}: slot {slot} out of range for escrow with {size} slots")


def printable(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")

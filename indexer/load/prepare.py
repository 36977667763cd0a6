"""The CPU half of loading a batch: classify and type every line, and render the COPY text the database thread
will stream. Pure (no database), so it runs in worker processes; its result pickles as a few byte strings.

A file batch travels to its worker as one block of bytes (whole lines) rather than a list of lines, so the
committing process never splits, pickles or holds lines one by one. In the worker, the block typer (C) takes the
plain lines of the bulk tx kinds and hands every other line to the Python paths here, which define what a line means.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from indexer.load.coerce import COERCE, Invalid, NeedsExactParse
from indexer.load.copytext import FORMATTERS
from indexer.load.fastpath import PREPARE_ESCAPING, PREPARE_PLAIN
from indexer.load.structs import typed_line
from indexer.load.typer import TYPER_KINDS, type_block
from indexer.records import KINDS, U32, U64, VOTES
from indexer import refusals
from indexer.workers import no_cyclic_gc
from indexer.sources.ndjson import Accepted, block_lines, classify_line, key_count, loads_exact

# Row positions (line number first) used by the general path.
_SCOPE_AT = {name: 1 + kind.columns.index("escrow_id" if kind.scope == "escrow" else "epoch_index")
             for name, kind in KINDS.items()}
_SLOT_AT = {name: (1 + kind.columns.index(kind.slot_fields[0]), kind.slot_fields[0],
                   kind.field(kind.slot_fields[0]).type == VOTES)
            for name, kind in KINDS.items() if kind.slot_fields}
assert all(len(kind.slot_fields) <= 1 for kind in KINDS.values())  # one slot field per kind (SlotCheck's model)
_NESTED = frozenset(name for name, kind in KINDS.items() if any(f.type == VOTES for f in kind.fields))
# Kinds keyed by (escrow_id, an integer, ...): their batches carry key ranges per escrow (KindBatch.key_ranges).
_RANGED = frozenset(name for name, kind in KINDS.items()
                    if kind.scope == "escrow" and len(kind.key) >= 2 and kind.field(kind.key[1]).type in (U32, U64))
_ESCROW_SLOTS_AT = 1 + KINDS["escrow"].columns.index("slots")
_F_IN, _F_OUT, _F_PAYLOAD = (1 + KINDS["finish"].columns.index(c)
                             for c in ("input_tokens", "output_tokens", "response_payload"))


@dataclass
class KindBatch:
    """One kind's rows of a batch: COPY text (source_line, columns, extra, source_id) and what the commit needs."""
    copy: bytes
    count: int
    scope: set                         # escrow ids or epochs to mark dirty
    slot_max: dict = field(default_factory=dict)  # escrow_id -> highest slot (or voter slot) named in the batch
    distinct_keys: bool = True         # no key twice in the batch (else only the upsert, last line wins, will do)
    # escrow_id -> (lowest, highest) second key column (inference_id, slot_id) in the batch, for kinds keyed by
    # more than the escrow: lets the commit ask whether any of the batch's keys may exist already (probe.py)
    key_ranges: dict = field(default_factory=dict)

    def absorb(self, other: "KindBatch") -> bool:
        """Add another part's facts of the same kind (not its COPY text: the caller joins those). True when the
        two parts share a scope, so a key may be in both: then only the joined rows tell (distinct_keys())."""
        shared = not self.scope.isdisjoint(other.scope)
        self.count += other.count
        self.scope |= other.scope
        for scope, slot in other.slot_max.items():
            if slot > self.slot_max.get(scope, -1):
                self.slot_max[scope] = slot
        for scope, (low, high) in other.key_ranges.items():  # every part of a ranged kind has each scope's range
            was = self.key_ranges.get(scope)
            self.key_ranges[scope] = (low, high) if was is None else (min(was[0], low), max(was[1], high))
        self.distinct_keys = self.distinct_keys and other.distinct_keys
        return shared


@dataclass
class Prepared:
    lines: int
    last_line: int
    kinds: dict[str, KindBatch]
    rejects: list                      # quarantine tuples (source_id, line, kind, reason, raw)
    parses: list = field(default_factory=list)   # vLLM parses of 0/0 Finish payloads (rules.refusal_parse)
    escrow_sizes: dict = field(default_factory=dict)  # escrow_id -> number of slots, from this batch's escrows
    skipped: int = 0                   # lines at or before the resume cursor
    # The batch's (line, raw) pairs again, set by the committing process (never pickled): a slot found out of
    # range is rare, and only then are the offending lines looked up.
    source_lines: Callable[[], Iterable[tuple[int, bytes]]] | None = None


def prepare_block(source_id: int, first_line: int, block: bytes, resume_after: int = 0) -> Prepared:
    """Worker entry for a file: a block of whole lines numbered from `first_line`; lines at or before
    `resume_after` are already committed and only counted. The block typer (indexer.load.typer, in C) takes the
    lines it can and hands every other line to the Python paths below."""
    sid = str(source_id)
    if b"\r" in block:  # CRLF line ends: block_lines strips them (rare), and the Python paths take every line
        skipped, lines = 0, []
        for number, raw in block_lines(first_line, block):
            if number > resume_after:
                lines.append((number, raw))
            elif raw.strip():
                skipped += 1
        prepared = prepare_batch(source_id, lines)
        prepared.skipped = skipped
    else:
        prepared, rows, handed = Prepared(0, 0, {}, []), {}, []

        def emit(kind: str, got: tuple) -> None:  # a row of the block typer's kinds goes back to it, in line order
            if kind in TYPER_KINDS:
                handed.append((kind, got[0], got[3], got[2]))
            else:
                rows.setdefault(kind, []).append(got)

        line = _line_typer(prepared, emit, source_id, orjson.loads, typed_line)

        def fallback(number: int, raw: bytes):
            counted = line(number, raw)
            return handed.pop() if handed else counted

        with no_cyclic_gc():
            count, last, skipped, typed = type_block(block, first_line, resume_after, sid.encode(), fallback)
            prepared.kinds = {kind: _kind_batch(kind, got) for kind, got in rows.items()}
        prepared.lines, prepared.last_line, prepared.skipped = count, last, skipped
        for kind, copy, n, scopes, slot_max, ranges, distinct in typed:
            prepared.kinds[kind] = KindBatch(copy, n, scopes, slot_max, distinct, ranges)
    prepared.last_line = max(prepared.last_line, first_line + block.count(b"\n", 0, len(block) - 1))
    return prepared


def prepare_batch(source_id: int, lines: Iterable[tuple[int, bytes]], objs: Iterable[dict] | None = None) -> Prepared:
    """Type and render (line number, raw line) pairs. ``objs``, when given, are the lines already parsed, in the
    same order (the poller's decoder has each record as a dict before it serializes it): they spare a JSON parse.
    The general path still reads ``raw``, so a line and its object must say the same."""
    loads = orjson.loads if objs is None else (lambda raw, nxt=iter(objs).__next__: nxt())
    with no_cyclic_gc():  # a line read from a file first tries the Struct decoder (indexer.load.structs)
        return _prepare(source_id, lines, loads, typed_line if objs is None else None)


def _prepare(source_id: int, lines: Iterable[tuple[int, bytes]], loads, first_try) -> Prepared:
    out = Prepared(0, 0, {}, [])
    rows: dict[str, list] = {}  # kind -> [(copy_line, scope, slot, key)], folded into a KindBatch at the end
    line = _line_typer(out, lambda kind, got: rows.setdefault(kind, []).append(got), source_id, loads, first_try)
    count = last = 0
    for number, raw in lines:
        if line(number, raw):
            count += 1
            last = number
    out.lines, out.last_line = count, last
    out.kinds = {kind: _kind_batch(kind, got) for kind, got in rows.items()}
    return out


def _line_typer(out: Prepared, emit, source_id: int, loads, first_try):
    """line(number, raw) -> whether the line counts (not blank): types one line, by the Struct decoder
    (``first_try``), the fast path or the general path, and hands its row to ``emit(kind, (copy_line, scope, slot,
    key))``, or quarantines it in ``out``."""
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


def _kind_batch(kind: str, got: list) -> KindBatch:
    """Fold one kind's (copy_line, scope, slot, key) tuples. One plain loop with dict lookups, because it runs for
    every line of the load: sorting (scope, value) pairs instead would cost about three times as much."""
    keys = {g[3] for g in got}  # counted here in the worker, so the commit knows whether a key repeats
    slot_max: dict = {}  # scope -> highest slot (or voter slot) named
    ranges: dict = {}    # escrow_id -> (lowest, highest) second key column, for _RANGED kinds
    slot_get, range_get, ranged = slot_max.get, ranges.get, kind in _RANGED
    for _, scope, slot, key in got:
        if slot is not None:
            top = slot_get(scope)
            if top is None or slot > top:
                slot_max[scope] = slot
        if ranged:
            escrow, value = key[0], key[1]
            seen = range_get(escrow)
            if seen is None:
                ranges[escrow] = (value, value)
            elif value < seen[0]:
                ranges[escrow] = (value, seen[1])
            elif value > seen[1]:
                ranges[escrow] = (seen[0], value)
    return KindBatch("".join([g[0] for g in got]).encode(), len(got), {g[1] for g in got}, slot_max,
                     len(keys) == len(got), ranges)


def _general(out: Prepared, emit, source_id: int, sid: str, number: int, raw: bytes) -> None:
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

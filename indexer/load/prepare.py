"""The CPU half of loading a batch: every line typed and rendered as the COPY text the database thread will stream
(indexer.load.typed), and the rows folded into one :class:`KindBatch` per kind with what the commit needs. Pure (no
database), so it runs in worker processes; its result pickles as a few byte strings.

A file batch travels to its worker as one block of bytes (whole lines) rather than a list of lines, so the
committing process never splits, pickles or holds lines one by one. In the worker, the block typer (C) takes the
plain lines of the bulk tx kinds and hands every other line to the Python paths, which define what a line means.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from indexer.load.partitions import ROUTED
from indexer.load.typed import TYPER_KINDS, line_typer, type_block, typed_line
from indexer.records import KINDS, U32, U64
from indexer.sources.ndjson import block_lines
from indexer.workers import no_cyclic_gc

# Kinds keyed by (escrow_id, an integer, ...): their batches carry key ranges per escrow (KindBatch.key_ranges).
_RANGED = frozenset(name for name, kind in KINDS.items()
                    if kind.scope == "escrow" and len(kind.key) >= 2 and kind.field(kind.key[1]).type in (U32, U64))


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
    # [(escrow id as its COPY cell, start, end)]: `copy` holds each escrow's rows together, copy[start:end] (a file's
    # routed kinds: group_by_escrow); None when not known to be grouped
    escrow_spans: list | None = None

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


def prepare_block(source_id: int, first_line: int, block: bytes, resume_after: int = 0) -> Prepared:
    """Worker entry for a file: a block of whole lines numbered from `first_line`; lines at or before
    `resume_after` are already committed and only counted. The block typer (indexer.load.typed, in C) takes the
    lines it can and hands every other line to the Python paths; without it the Python paths take all."""
    if type_block is None or b"\r" in block:
        return prepare_block_python(source_id, first_line, block, resume_after)
    sid = str(source_id)
    prepared, rows, handed = Prepared(0, 0, {}, []), {}, []

    def emit(kind: str, got: tuple) -> None:  # a row of the block typer's kinds goes back to it, in line order
        if kind in TYPER_KINDS:
            handed.append((kind, got[0], got[3], got[2]))
        else:
            rows.setdefault(kind, []).append(got)

    line = line_typer(prepared, emit, source_id, orjson.loads, typed_line)

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


def prepare_file_block(source_id: int, first_line: int, block: bytes, resume_after: int = 0) -> Prepared:
    """:func:`prepare_block` for the file load: each escrow-keyed tx kind's rows grouped by escrow
    (:func:`group_by_escrow`), in the worker, so that the commit routes a batch spanning several epochs a slice per
    escrow (indexer.load.partitions.EpochRouter.route) rather than a row at a time on its own busy thread."""
    prepared = prepare_block(source_id, first_line, block, resume_after)
    for kind, kb in prepared.kinds.items():
        if kind in ROUTED and kb.copy:
            kb.copy, kb.escrow_spans = group_by_escrow(kb.copy)
    return prepared


def group_by_escrow(copy: bytes) -> tuple[bytes, list]:
    """COPY rows (line number, escrow id, ...) with each escrow's rows together, in the order escrows first appear
    and each escrow's rows in their order; and the [(escrow cell, start, end)] of each escrow's rows. A stream
    that interleaves escrows (blocks of the chain) gives a batch's rows of a hundred escrows in turn. Row order
    means nothing to the load (every row carries its line; the upsert orders by line), so this only moves bytes."""
    groups: dict[bytes, list[bytes]] = {}
    rows = copy.split(b"\n")
    rows.pop()  # after the last newline
    for row in rows:
        cell = row.split(b"\t", 2)[1]
        group = groups.get(cell)
        if group is None:
            groups[cell] = [row]
        else:
            group.append(row)
    if len(groups) == 1:
        return copy, [(next(iter(groups)), 0, len(copy))]
    parts, spans, at = [], [], 0
    for cell, group in groups.items():
        group.append(b"")  # the last row's newline
        part = b"\n".join(group)
        parts.append(part)
        spans.append((cell, at, at + len(part)))
        at += len(part)
    return b"".join(parts), spans


def prepare_block_python(source_id: int, first_line: int, block: bytes, resume_after: int = 0) -> Prepared:
    """:func:`prepare_block` by the Python paths alone: without the C block typer (indexer.load.typed.IMPL), and
    for a block with CRLF line ends (rare: block_lines strips them). The same rows as the C path, line for line."""
    skipped, lines = 0, []
    for number, raw in block_lines(first_line, block):
        if number > resume_after:
            lines.append((number, raw))
        elif raw.strip():
            skipped += 1
    prepared = prepare_batch(source_id, lines)
    prepared.skipped = skipped
    prepared.last_line = max(prepared.last_line, first_line + block.count(b"\n", 0, len(block) - 1))
    return prepared


def prepare_batch(source_id: int, lines: Iterable[tuple[int, bytes]], objs: Iterable[dict] | None = None) -> Prepared:
    """Type and render (line number, raw line) pairs. ``objs``, when given, are the lines already parsed, in the
    same order (the poller's decoder has each record as a dict before it serializes it): they spare a JSON parse.
    The general path still reads ``raw``, so a line and its object must say the same."""
    loads = orjson.loads if objs is None else (lambda raw, nxt=iter(objs).__next__: nxt())
    with no_cyclic_gc():  # a line read from a file first tries the Struct decoder (indexer.load.typed.structs)
        return _prepare(source_id, lines, loads, typed_line if objs is None else None)


def _prepare(source_id: int, lines: Iterable[tuple[int, bytes]], loads, first_try) -> Prepared:
    out = Prepared(0, 0, {}, [])
    rows: dict[str, list] = {}  # kind -> [(copy_line, scope, slot, key)], folded into a KindBatch at the end
    line = line_typer(out, lambda kind, got: rows.setdefault(kind, []).append(got), source_id, loads, first_try)
    count = last = 0
    for number, raw in lines:
        if line(number, raw):
            count += 1
            last = number
    out.lines, out.last_line = count, last
    out.kinds = {kind: _kind_batch(kind, got) for kind, got in rows.items()}
    return out


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



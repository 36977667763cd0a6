"""The CPU half of loading a batch: classify and type every line, and render the COPY text the database thread
will stream. Pure (no database), so it runs in worker processes; its result pickles as a few byte strings."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import orjson


from indexer.load.coerce import COERCE, Invalid, NeedsExactParse
from indexer.load.copytext import FORMATTERS
from indexer.load.kinds import KINDS, VOTES
from indexer.rules import refusals
from indexer.sources.ndjson import Accepted, classify_line, loads_exact

# Row positions (line number first) used below.
_KEY_AT = {name: [1 + kind.columns.index(k) for k in kind.key] for name, kind in KINDS.items()}
_SCOPE_AT = {name: 1 + kind.columns.index("escrow_id" if kind.scope == "escrow" else "epoch_index")
             for name, kind in KINDS.items()}
_SLOTS_AT = {name: [(1 + kind.columns.index(f), f, kind.field(f).type == VOTES) for f in kind.slot_fields]
             for name, kind in KINDS.items() if kind.slot_fields}
_ESCROW_SLOTS_AT = 1 + KINDS["escrow"].columns.index("slots")
_F_IN, _F_OUT, _F_PAYLOAD = (1 + KINDS["finish"].columns.index(c)
                             for c in ("input_tokens", "output_tokens", "response_payload"))


@dataclass
class KindBatch:
    """One kind's rows of a batch: COPY text (source_line, columns, extra, source_id) and what the commit needs."""
    copy: bytes
    count: int
    keys_unique: bool                  # no key twice in the batch (the direct COPY path is allowed)
    scope: set                         # escrow ids or epochs to mark dirty
    slot_rows: list = field(default_factory=list)  # (line, escrow_id, [(field, slot, is_votes)], raw)


@dataclass
class Prepared:
    lines: int
    last_line: int
    kinds: dict[str, KindBatch]
    rejects: list                      # quarantine tuples (source_id, line, kind, reason, raw)
    parses: list = field(default_factory=list)   # vLLM parses of 0/0 Finish payloads (rules.refusal_parse)
    escrow_sizes: dict = field(default_factory=dict)  # escrow_id -> number of slots, from this batch's escrows


def prepare_batch(source_id: int, batch: list[tuple[int, bytes]]) -> Prepared:
    rejects, parses, sizes = [], [], {}
    text, keys, scope, slots = defaultdict(list), defaultdict(set), defaultdict(set), defaultdict(list)
    sid = str(source_id)
    for number, raw in batch:
        verdict = classify_line(raw)
        if not isinstance(verdict, Accepted):
            rejects.append((source_id, number, verdict.kind, verdict.reason, printable(raw)))
            continue
        kind = verdict.kind
        try:
            try:
                row = (number, *COERCE[kind](verdict.obj))
            except NeedsExactParse:
                row = (number, *COERCE[kind](loads_exact(raw), exact=True))
        except Invalid as exc:
            rejects.append((source_id, number, kind, str(exc), printable(raw)))
            continue
        text[kind].append(FORMATTERS[kind](row, sid))
        keys[kind].add(tuple(row[i] for i in _KEY_AT[kind]))
        scope[kind].add(row[_SCOPE_AT[kind]])
        if kind in _SLOTS_AT:
            slots[kind].append((number, row[1], [(name, _max_slot(row[at], is_votes), is_votes)
                                                 for at, name, is_votes in _SLOTS_AT[kind]], raw))
        elif kind == "escrow":
            sizes[row[1]] = len(row[_ESCROW_SLOTS_AT])
        if kind == "finish" and row[_F_IN] == 0 and row[_F_OUT] == 0 and row[_F_PAYLOAD]:
            parses.append(refusals.parse_row(row[1], row[2], row[_F_PAYLOAD]))
    kinds = {k: KindBatch("".join(lines).encode(), len(lines), len(keys[k]) == len(lines), scope[k], slots[k])
             for k, lines in text.items()}
    return Prepared(len(batch), batch[-1][0], kinds, rejects, parses, sizes)


def _max_slot(value, is_votes: bool):
    if not is_votes:
        return value
    return max((v["voter_slot"] for v in orjson.loads(value)), default=None)


def printable(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")

"""Quarantine rows that a later valid record supersedes are marked resolved (kept, with what resolved them).

A quarantine row stays open (``resolved_at`` null) until a batch of a later transaction brings a valid line that
takes its place:

* the same record: a line of the same kind and key (the row's raw line read as JSON) that the batch stored as the
  key's row (inserted or amended); a valid line that changes nothing does not resolve a row of another input, so a
  record that lost to a stored one of its key (two txs of one key, indexer.load.samekey; a signed diff kept by
  signature, indexer.load.signed_conflicts) stays open when the kept record arrives again;
* the same line of the same input corrected: a valid line at the same line number of an input read from the same
  place (``rec.source.uri``), of the same key when the row's key can be read (else, a line that did not parse, any
  valid line there).

A line this batch quarantines itself resolves nothing, and rows quarantined in the batch's own transaction are left
open. The work is done only while open rows exist (a partial index finds them), so a clean database pays one index
probe per batch.
"""
from __future__ import annotations

import orjson
import psycopg

from indexer.records import KINDS, PG_TYPES

# the open rows of other inputs: of the batch's kinds by key, or of its input's place by line
_OPEN = """
SELECT q.source_id, q.line, q.kind, q.raw, s.uri = %(uri)s AS same_place
FROM rec.quarantine q JOIN rec.source s USING (source_id)
WHERE q.resolved_at IS NULL AND q.source_id <> %(source_id)s AND q.quarantined_at < now()
  AND (q.kind = ANY(%(kinds)s) OR s.uri = %(uri)s)
ORDER BY q.source_id, q.line
"""

_RESOLVE = """
UPDATE rec.quarantine q SET resolved_at = now(), resolved_source_id = %(source_id)s, resolved_line = r.by_line
FROM unnest(%(sources)s::bigint[], %(lines)s::bigint[], %(by)s::bigint[]) AS r(source_id, line, by_line)
WHERE q.source_id = r.source_id AND q.line = r.line AND q.resolved_at IS NULL
"""


def _copy_cell(cell: bytes) -> str:
    """A COPY text cell back to its text (the escapes the renderers write)."""
    if b"\\" not in cell:
        return cell.decode("utf-8")
    out, i = [], 0
    while i < len(cell):
        c = cell[i:i + 1]
        if c == b"\\" and i + 1 < len(cell):
            out.append({b"t": b"\t", b"n": b"\n", b"r": b"\r", b"\\": b"\\"}.get(cell[i + 1:i + 2], cell[i + 1:i + 2]))
            i += 2
        else:
            out.append(c)
            i += 1
    return b"".join(out).decode("utf-8")


def _batch_keys(kind: str, copy: bytes) -> dict[int, tuple[str, ...]]:
    """line -> the key of each COPY row of ``kind`` (each row starts with its line, then the key columns)."""
    n = len(KINDS[kind].key)
    out = {}
    for row in copy.split(b"\n"):
        if row:
            cells = row.split(b"\t", n + 1)
            out[int(cells[0])] = tuple(_copy_cell(c) for c in cells[1:n + 1])
    return out


def _cell(text: str) -> bytes:
    """A key value as its COPY text cell."""
    return (text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
            .encode("utf-8"))


def _found_keys(copy: bytes, wanted: set[tuple[str, ...]]) -> dict[int, tuple[str, ...]]:
    """line -> key of the COPY rows whose key is one of ``wanted``, found by searching the text for each key's cells
    (a few open rows: cheaper than reading every row's key back, which costs ~1.7 µs a row)."""
    out = {}
    for key in wanted:
        needle = b"\t" + b"\t".join(_cell(k) for k in key) + b"\t"
        at = copy.find(needle)
        while at >= 0:
            start = copy.rfind(b"\n", 0, at) + 1
            if copy[start:at].isdigit():  # the needle starts right after the row's line number: its key cells
                out[int(copy[start:at])] = key
            at = copy.find(needle, at + 1)
    return out


SEARCHED = 16  # open keys of a kind up to which they are searched for (3 ms each in 60,000 rows) rather than every
# row's key read back (100 ms)


def _raw_key(kind: str | None, raw: str | None) -> tuple[str, ...] | None:
    """The key a quarantined line names, as its COPY text would be; None when it cannot be read."""
    if kind not in KINDS or raw is None:
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    key = []
    for name in KINDS[kind].key:
        v = obj.get(name)
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            return None
        key.append(str(v))
    return tuple(key)


def _stored_here(conn: psycopg.Connection, kind: str, source_id: int, lines: dict[int, tuple[str, ...]]) -> set[int]:
    """Which of the batch's ``lines`` (line -> key) are the stored row of their key: inserted or amended by it. Read
    by key (the primary key's index), each key cell cast to its column's type."""
    spec = KINDS[kind]
    order = sorted(lines)
    cells = [[lines[line][i] for line in order] for i in range(len(spec.key))]
    k = ", ".join("%s::text[]" for _ in spec.key)
    names = ", ".join(f"c{i}" for i in range(len(spec.key)))
    on = " AND ".join(f"t.{name} = k.c{i}::{PG_TYPES[spec.field(name).type]}" for i, name in enumerate(spec.key))
    return {line for (line,) in conn.execute(
        f"SELECT t.source_line FROM rec.{spec.table} t JOIN unnest({k}) AS k({names}) ON {on} "
        f"WHERE t.source_id = %s", (*cells, source_id))}


def resolve(conn: psycopg.Connection, source_id: int, batch: dict[str, bytes]) -> int:
    """Mark resolved the open quarantine rows that this batch's valid lines supersede (caller's transaction, after
    the batch's own quarantine rows are written). ``batch``: kind -> the COPY text of its rows. Returns how many
    rows were resolved."""
    if not batch or not conn.execute(
            "SELECT EXISTS (SELECT 1 FROM rec.quarantine WHERE resolved_at IS NULL)").fetchone()[0]:
        return 0
    uri = conn.execute("SELECT uri FROM rec.source WHERE source_id = %s", (source_id,)).fetchone()[0]
    open_rows = [(q_source, q_line, q_kind, _raw_key(q_kind, raw), same_place) for q_source, q_line, q_kind, raw,
                 same_place in conn.execute(_OPEN, {"uri": uri, "source_id": source_id, "kinds": sorted(batch)})]
    if not open_rows:
        return 0
    # only the kinds an open row may match are read from the COPY text: every row's key when a row of this input's
    # place is open (its line numbers decide), else only the rows of the open keys
    if any(row[4] for row in open_rows):
        keys = {kind: _batch_keys(kind, copy) for kind, copy in batch.items()}
    else:
        open_keys: dict[str, set] = {}
        for row in open_rows:
            if row[3] is not None and row[2] in batch:
                open_keys.setdefault(row[2], set()).add(row[3])
        keys = {kind: _found_keys(batch[kind], wanted) if len(wanted) <= SEARCHED else _batch_keys(kind, batch[kind])
                for kind, wanted in open_keys.items()}
    every = sorted(line for lines in keys.values() for line in lines)
    # the batch's lines quarantined (now, or by a load of this file before)
    rejected = {line for (line,) in conn.execute(
        "SELECT line FROM rec.quarantine WHERE source_id = %s AND line = ANY(%s)", (source_id, every))}
    keys = {kind: {line: key for line, key in lines.items() if line not in rejected} for kind, lines in keys.items()}
    by_key = {kind: {} for kind in keys}  # kind -> key -> the batch's first line of it
    for kind, lines in keys.items():
        for line, key in sorted(lines.items(), reverse=True):
            by_key[kind][key] = line
    kind_at = {line: kind for kind, lines in keys.items() for line in lines}
    found: dict[tuple[int, int], int] = {}
    elsewhere: dict[str, list[tuple[tuple[int, int], int]]] = {}
    for q_source, q_line, q_kind, key, same_place in open_rows:
        if same_place and q_line in kind_at:
            here = kind_at[q_line]
            if key is None or (here == q_kind and keys[here][q_line] == key):
                found[(q_source, q_line)] = q_line
                continue
        if key is not None and q_kind in by_key and (line := by_key[q_kind].get(key)) is not None:
            elsewhere.setdefault(q_kind, []).append(((q_source, q_line), line))
    for kind, pairs in elsewhere.items():
        stored = _stored_here(conn, kind, source_id, {line: keys[kind][line] for _, line in pairs})
        found.update((q, line) for q, line in pairs if line in stored)
    if not found:
        return 0
    rows = sorted(found.items())
    return conn.execute(_RESOLVE, {"source_id": source_id, "sources": [q[0] for q, _ in rows],
                                   "lines": [q[1] for q, _ in rows], "by": [by for _, by in rows]}).rowcount

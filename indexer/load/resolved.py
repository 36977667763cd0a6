"""Quarantine rows that a later valid record supersedes are marked resolved (kept, with what resolved them).

A quarantine row stays open (``resolved_at`` null) until a batch of a later transaction brings a valid line that
takes its place:

* the same record: a line of the same kind and key that the batch stored as the key's row (inserted or amended); a
  valid line that changes nothing does not resolve a row of another input, so a record that lost to a stored one of
  its key (two txs of one key, indexer.load.samekey; a signed diff kept by signature, indexer.load.signed_conflicts)
  stays open when the kept record arrives again;
* the same line of the same input corrected: a valid line at the same line number of an input read from the same
  place (``rec.source.uri``), of the same key when the row's key can be read (else, a line that did not parse, any
  valid line there).

Each row keeps the key its line names (``rec.quarantine.record_key``, read once from the raw line by
:func:`read_keys`), so the same-record match is one set-based statement per batch: the open rows of the batch's
kinds and escrows (or epochs) joined by key to the rows the batch stored. A line this batch quarantines itself
resolves nothing, and rows quarantined in the batch's own transaction are left open. The work is done only while open
rows exist (a partial index finds them), so a clean database pays one index probe per batch.
"""
from __future__ import annotations

import orjson
import psycopg

from indexer.load.typed.coerce import COERCERS, Invalid
from indexer.records import KINDS, PG_TYPES

_RESOLVE = """
UPDATE rec.quarantine q SET resolved_at = now(), resolved_source_id = %(source_id)s, resolved_line = r.by_line
FROM unnest(%(sources)s::bigint[], %(lines)s::bigint[], %(by)s::bigint[]) AS r(source_id, line, by_line)
WHERE q.source_id = r.source_id AND q.line = r.line AND q.resolved_at IS NULL
"""


def record_key(kind: str | None, raw: str | None) -> list[str]:
    """The key a quarantined line names, each value as text the way the typer stores it (its coercer: a decimal
    string or a number alike); empty when the line names no key that could be stored."""
    if kind not in KINDS or raw is None:
        return []
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(obj, dict):
        return []
    spec, out = KINDS[kind], []
    for name in spec.key:
        try:
            value = str(COERCERS[spec.field(name).type](obj.get(name), name))
        except Invalid:
            return []
        if "\x00" in value:  # text the server cannot hold; the typer refuses such a line too
            return []
        out.append(value)
    return out


def read_keys(conn: psycopg.Connection) -> int:
    """Fill ``record_key`` of the open rows not read yet (rows from before the column, and the rows the current
    batch quarantined): each raw line is parsed once. Returns how many rows were read."""
    rows = conn.execute("SELECT source_id, line, kind, raw FROM rec.quarantine "
                        "WHERE resolved_at IS NULL AND record_key IS NULL ORDER BY source_id, line").fetchall()
    if not rows:
        return 0
    keys = [record_key(kind, raw) for _, _, kind, raw in rows]
    # each key as a one-dimensional array literal's elements, passed as jsonb (arrays of arrays of varying length)
    conn.execute(
        "UPDATE rec.quarantine q SET record_key = ARRAY(SELECT jsonb_array_elements_text(r.key)) "
        "FROM unnest(%s::bigint[], %s::bigint[], %s::jsonb[]) AS r(source_id, line, key) "
        "WHERE q.source_id = r.source_id AND q.line = r.line",
        ([r[0] for r in rows], [r[1] for r in rows], [orjson.dumps(k).decode() for k in keys]))
    return len(rows)


def _same_record(kinds: list[str]) -> str:
    """One statement: the open rows of other inputs, of each of the batch's kinds and scopes, whose key is a row the
    batch stored (its source, a line after ``floor`` up to ``last``), resolved by that row's line."""
    parts = []
    for kind in kinds:
        spec = KINDS[kind]
        # record_key holds each value as its column's type prints it (record_key), so every cast succeeds
        on = " AND ".join(f"t.{name} = o.record_key[{i + 1}]::{PG_TYPES[spec.field(name).type]}"
                          for i, name in enumerate(spec.key))
        parts.append(
            f"SELECT o.source_id, o.line, t.source_line AS by_line FROM rec.quarantine o JOIN rec.{spec.table} t "
            f"ON {on} WHERE o.resolved_at IS NULL AND o.kind = '{kind}' "
            f"AND o.record_key[1] = ANY(%(scope_{kind})s::text[]) AND cardinality(o.record_key) = {len(spec.key)} "
            f"AND o.source_id <> %(source_id)s AND o.quarantined_at < now() "
            f"AND t.source_id = %(source_id)s AND t.source_line > %(floor)s AND t.source_line <= %(last)s")
    return (f"UPDATE rec.quarantine q SET resolved_at = now(), resolved_source_id = %(source_id)s, "
            f"resolved_line = m.by_line FROM ({' UNION ALL '.join(parts)}) m "
            f"WHERE q.source_id = m.source_id AND q.line = m.line AND q.resolved_at IS NULL")


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


def _batch_keys(kind: str, copy: bytes, wanted: set[int]) -> dict[int, list[str]]:
    """line -> the key of the COPY rows of ``kind`` at the ``wanted`` lines (each row starts with its line, then the
    key columns)."""
    n = len(KINDS[kind].key)
    out = {}
    for row in copy.split(b"\n"):
        if row:
            cells = row.split(b"\t", n + 1)
            if int(cells[0]) in wanted:
                out[int(cells[0])] = [_copy_cell(c) for c in cells[1:n + 1]]
    return out


def _same_place(conn: psycopg.Connection, source_id: int, batch: dict[str, bytes], floor: int, last: int) -> int:
    """Resolve the open rows of other inputs read from this input's place at lines the batch holds valid: of the same
    kind and key, or any valid line when the row names no key. Rare (a file published again corrected): the batch's
    lines are read only when such rows exist."""
    rows = conn.execute(
        "SELECT q.source_id, q.line, q.kind, q.record_key FROM rec.quarantine q JOIN rec.source s USING (source_id) "
        "WHERE q.resolved_at IS NULL AND q.source_id <> %(source_id)s AND q.quarantined_at < now() "
        "AND q.line > %(floor)s AND q.line <= %(last)s "
        "AND s.uri = (SELECT uri FROM rec.source WHERE source_id = %(source_id)s)",
        {"source_id": source_id, "floor": floor, "last": last}).fetchall()
    if not rows:
        return 0
    wanted = {line for _, line, _, _ in rows}
    rejected = {line for (line,) in conn.execute(  # the batch's lines quarantined (now, or by a load of this file)
        "SELECT line FROM rec.quarantine WHERE source_id = %s AND line = ANY(%s)", (source_id, sorted(wanted)))}
    at = {line: (kind, key) for kind, copy in batch.items()
          for line, key in _batch_keys(kind, copy, wanted - rejected).items()}
    found = sorted((q_source, q_line) for q_source, q_line, q_kind, key in rows
                   if q_line in at and (not key or at[q_line] == (q_kind, key)))
    if not found:
        return 0
    return conn.execute(_RESOLVE, {"source_id": source_id, "sources": [s for s, _ in found],
                                   "lines": [line for _, line in found], "by": [line for _, line in found]}).rowcount


def resolve(conn: psycopg.Connection, source_id: int, batch: dict[str, tuple[bytes, set]], floor: int,
            last: int) -> int:
    """Mark resolved the open quarantine rows that this batch's valid lines supersede (caller's transaction, after
    the batch's own quarantine rows and records are written). ``batch``: kind -> (the COPY text of its rows, its
    scope: escrow ids or epochs); the batch's lines are those after ``floor`` up to ``last``. Returns how many rows
    were resolved."""
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM rec.quarantine WHERE resolved_at IS NULL)").fetchone()[0]:
        return 0
    read_keys(conn)  # a batch of quarantined lines alone too: each row is read in the batch that wrote it
    if not batch:
        return 0
    done = _same_place(conn, source_id, {kind: copy for kind, (copy, _) in batch.items()}, floor, last)
    kinds = sorted(batch)
    params = {"source_id": source_id, "floor": floor, "last": last,
              **{f"scope_{kind}": sorted(str(s) for s in batch[kind][1]) for kind in kinds}}
    return done + conn.execute(_same_record(kinds), params).rowcount

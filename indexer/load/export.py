"""`indexer export`: stored records back out as normalized NDJSON that `ingest` reads to the same records (and so
the same replay and findings), followed by the poller's state of the same epochs (indexer.load.pollstate), so that
a database rebuilt from the file polls on where this one stands."""
from __future__ import annotations

import gzip
import sys
from contextlib import contextmanager

import psycopg

from indexer.load import pollstate
from indexer.records import KINDS, LOAD_ORDER


def export_statement(kind_name: str, epochs: tuple[int, int] | None) -> tuple[str, tuple]:
    kind = KINDS[kind_name]
    pairs = ", ".join(f"'{c}', {c}" for c in kind.columns)
    where, params = "", ()
    if epochs is not None:
        # every record table carries the epoch: escrow-keyed txs their escrow's (its partition, docs/partitioning.md)
        where, params = "WHERE epoch_index BETWEEN %s AND %s", epochs
    sql = (f"SELECT (jsonb_strip_nulls(jsonb_build_object('kind', '{kind.name}', {pairs})) || coalesce(extra, '{{}}'))"
           f"::text FROM rec.{kind.table} {where} ORDER BY {', '.join(kind.key)}")
    return sql, params


@contextmanager
def _open_out(path: str):
    if path == "-":
        yield sys.stdout.buffer
    elif path.endswith(".gz"):
        with gzip.open(path, "wb") as fh:
            yield fh
    else:
        with open(path, "wb") as fh:
            yield fh


def export_records(url: str, path: str, epochs: tuple[int, int] | None = None) -> dict[str, int]:
    with psycopg.connect(url) as conn, _open_out(path) as out:
        return write_records(conn, out, epochs)


def write_records(conn: psycopg.Connection, out, epochs: tuple[int, int] | None) -> dict[str, int]:
    """Every record of the epochs (all with None) to `out` as NDJSON lines, kind by kind in load order, then the
    poller's state of those epochs; the count of each kind. Also `indexer archive`'s writer, inside its snapshot."""
    counts: dict[str, int] = {}
    for name in LOAD_ORDER:
        sql, params = export_statement(name, epochs)
        n = 0
        with conn.cursor(name=f"export_{name}") as cur:
            cur.itersize = 10_000
            cur.execute(sql, params)
            for (line,) in cur:
                out.write(line.encode() + b"\n")
                n += 1
        counts[name] = n
    counts.update(pollstate.write_state(conn, out, epochs))
    return counts

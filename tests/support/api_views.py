"""What the load-order tests compare: every api view's rows as text, and record streams in other orders."""
from __future__ import annotations

import psycopg
from psycopg import sql

DIRTY_TABLES = ("replay.dirty_escrow", "rules.dirty_epoch", "rules.dirty_escrow")


def api_rows(c: psycopg.Connection, skip_views: set[str], skip_columns: set[str]) -> dict[str, list]:
    """Each api view's rows (columns as text, rows sorted), but the given views and columns and every timestamp
    (when a row was written differs between two loads of the same records)."""
    out = {}
    names = [r[0] for r in c.execute("SELECT table_name FROM information_schema.views "
                                     "WHERE table_schema = 'api' ORDER BY 1") if r[0] not in skip_views]
    for view in names:
        columns = [name for name, kind in c.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'api' "
            "AND table_name = %s ORDER BY ordinal_position", (view,))
            if kind != "timestamp with time zone" and name not in skip_columns]
        rows = c.execute(sql.SQL("SELECT {} FROM api.{}").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(name)) for name in columns),
            sql.Identifier(view))).fetchall()
        out[view] = sorted(rows, key=lambda row: [(v is None, v or "") for v in row])
    return out


def dirty_marks(c: psycopg.Connection) -> list[tuple]:
    """How many dirty marks are left in each table (none, after a command)."""
    return [c.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(t))).fetchone() for t in DIRTY_TABLES]


def interleaved(records: list[dict]) -> list[dict]:
    """Epoch-level records first, then one record of each escrow in turn (round robin: many escrows open at once,
    each escrow's records in their order)."""
    head = [r for r in records if "escrow_id" not in r]
    queues: dict[str, list[dict]] = {}
    for r in records:
        if "escrow_id" in r:
            queues.setdefault(r["escrow_id"], []).append(r)
    out, at = list(head), 0
    while any(at < len(q) for q in queues.values()):
        out.extend(q[at] for q in queues.values() if at < len(q))
        at += 1
    return out

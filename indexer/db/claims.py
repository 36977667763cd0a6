"""Work queues in the database: a stage claims dirty keys with SKIP LOCKED, so concurrent workers never take the
same key, and a key re-marked while it is being processed survives for the next pass."""
from __future__ import annotations

import psycopg


def claim(conn: psycopg.Connection, table: str, column: str, limit: int, hold: list | tuple = (),
          only: list | tuple | None = None) -> list:
    """Delete and return up to `limit` dirty keys inside the caller's transaction; keys in `hold` stay dirty. With
    `only`, just those keys (the ones still dirty), waiting for a mark another transaction holds instead of
    skipping it: the caller wants these keys, not whichever are free."""
    return [r[0] for r in claim_rows(conn, table, column, limit, column, hold, only)]


def claim_rows(conn: psycopg.Connection, table: str, column: str, limit: int, returning: str,
               hold: list | tuple = (), only: list | tuple | None = None) -> list[tuple]:
    """claim(), returning the `returning` columns of each claimed mark."""
    conditions, params = [], []
    if hold:
        conditions.append(f"{column} <> ALL(%s)")
        params.append(list(hold))
    if only is not None:
        conditions.append(f"{column} = ANY(%s)")
        params.append(list(only))
    where = f"WHERE {' AND '.join(conditions)} " if conditions else ""
    lock = "FOR UPDATE" if only is not None else "FOR UPDATE SKIP LOCKED"
    return conn.execute(
        f"""DELETE FROM {table} WHERE {column} IN (
              SELECT {column} FROM {table} {where}ORDER BY {column} LIMIT %s {lock})
            RETURNING {returning}""", (*params, limit)).fetchall()

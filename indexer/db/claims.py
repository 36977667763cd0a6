"""Work queues in the database: a stage claims dirty keys with SKIP LOCKED, so concurrent workers never take the
same key, and a key re-marked while it is being processed survives for the next pass."""
from __future__ import annotations

import psycopg


def claim(conn: psycopg.Connection, table: str, column: str, limit: int, hold: list | tuple = ()) -> list:
    """Delete and return up to `limit` dirty keys inside the caller's transaction; keys in `hold` stay dirty."""
    return [r[0] for r in claim_rows(conn, table, column, limit, column, hold)]


def claim_rows(conn: psycopg.Connection, table: str, column: str, limit: int, returning: str,
               hold: list | tuple = ()) -> list[tuple]:
    """claim(), returning the `returning` columns of each claimed mark."""
    held = f"WHERE {column} <> ALL(%s) " if hold else ""
    return conn.execute(
        f"""DELETE FROM {table} WHERE {column} IN (
              SELECT {column} FROM {table} {held}ORDER BY {column} LIMIT %s FOR UPDATE SKIP LOCKED)
            RETURNING {returning}""", (list(hold), limit) if hold else (limit,)).fetchall()

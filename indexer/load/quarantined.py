"""The quarantine rows a load wrote, for the command that ran it to show: which file and line, and why."""
from __future__ import annotations

from datetime import datetime

import psycopg


def since(conn: psycopg.Connection, started: datetime, limit: int) -> list[tuple[str, int, str]]:
    """(source, line, reason) of up to ``limit`` quarantine rows of the sources loaded since ``started`` (the
    server's clock), or written since then (a stored record the load moved there), in file and line order."""
    return conn.execute(
        """SELECT s.uri, q.line, q.reason FROM rec.quarantine q JOIN rec.source s USING (source_id)
           WHERE s.last_loaded_at >= %(t)s OR q.quarantined_at >= %(t)s
           ORDER BY s.last_loaded_at, s.uri, q.line LIMIT %(n)s""", {"t": started, "n": limit}).fetchall()

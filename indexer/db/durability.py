"""Commits that do not wait for the WAL flush, for work whose source can give it again.

With ``synchronous_commit = off`` a commit returns once its WAL is written to the server's buffers; the WAL writer
flushes it within ``wal_writer_delay``. A server crash can lose the last commits, always whole and in order, never
one without those before it. That is safe wherever a transaction's rows travel with the cursor that says they are
done (a file's batch and its resume line, a poll's chunk and its escrow cursor, a replay chunk and its dirty marks):
what is lost is fetched, loaded or replayed again. A commit with the session's own setting flushes every earlier
one too, so the work's last commit (a file's completion, a poll cycle's end) makes all of it durable when it
returns. The flush costs 0.1 ms on a fast disk and 1-30 ms on a slow one, per commit, and a poll cycle commits
hundreds of times (a lease, a cursor, the watchdog's row per escrow).
"""
from __future__ import annotations

import psycopg


def commit_without_flush_wait(conn: psycopg.Connection) -> str:
    """Turn ``synchronous_commit`` off for the session; return the setting it had (the durable one, for
    :func:`flush_at_commit`). On a connection outside autocommit this runs in its transaction: commit it to keep
    the setting."""
    return conn.execute("SELECT current_setting('synchronous_commit'), set_config('synchronous_commit', 'off', false)"
                        ).fetchone()[0]


def flush_at_commit(conn: psycopg.Connection, durable: str) -> None:
    """Inside a transaction: it commits with ``durable`` (as :func:`commit_without_flush_wait` returned it),
    waiting for its WAL and every earlier commit's to be flushed."""
    conn.execute("SELECT set_config('synchronous_commit', %s, true)", (durable,))

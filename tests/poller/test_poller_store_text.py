"""A peer's error text with a NUL byte (a JSON string may carry "\\u0000") is stored, not refused: PostgreSQL
refuses NUL in text, and as the poller keeps queued failure rows for the next transaction, one such text would fail
every commit after it."""
from __future__ import annotations

import psycopg

from indexer.poller.store import Store


def test_a_nul_in_a_peers_error_text_is_stored_and_does_not_block_later_commits(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        store = Store(conn, archive=False)
        store.fail("host:gonka1x", "http://node.example/\x00", "vLLM said: bad\x00request " + "z" * 5000, True)
        store.error("escrow:9", "node said \x00")
        store.finish_cycle("http://node.example", "cycle \x00 failed")
        failures = conn.execute("SELECT source, url, error FROM net.failure ORDER BY source").fetchall()
        errors = dict(conn.execute("SELECT source, last_error FROM net.cursor").fetchall())
    assert [f[0] for f in failures] == ["chain", "host:gonka1x"]
    url, error = failures[1][1:]
    assert url == "http://node.example/\ufffd" and error.startswith("vLLM said: bad\ufffdrequest") and len(error) == 2000
    assert errors["escrow:9"] == "node said \ufffd" and "\ufffd" in errors["chain"]

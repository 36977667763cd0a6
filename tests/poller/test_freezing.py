"""Settled epochs' partitions are frozen once (indexer.poller.freezing), on the real server: which epochs, that the
relation really is frozen (its relfrozenxid moves up to the present), once only, and the paths where a partition is
held by another session, dropped meanwhile, or the database cannot be reached."""
from __future__ import annotations

import logging

import psycopg
import pytest

from indexer.poller import freezing
from indexer.poller.freezing import freeze_job, freeze_settled
from tests.support.partition_kit import EPOCHS, three_epochs  # noqa: F401 - the fixture

BURNED_XIDS = 300  # well above the transactions a run itself takes (one per partition it records)


def _epoch_partitions(conn, epoch: int) -> set[str]:
    return {f'part."{name}"' for (name,) in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'part' AND c.relispartition AND c.relname LIKE %s", (f"%\\_e{epoch}",))}


def _xid_age(conn, relation: str) -> int:
    return conn.execute("SELECT age(relfrozenxid) FROM pg_class WHERE oid = %s::regclass", (relation,)).fetchone()[0]


def _burn_xids(url: str, n: int = BURNED_XIDS) -> None:
    """Commit ``n`` transactions that each take a transaction id, so that an unfrozen relation's relfrozenxid is
    at least that old."""
    with psycopg.connect(url, autocommit=True) as c:
        for _ in range(n):
            c.execute("SELECT pg_current_xact_id()")


def _final(conn, epoch: int) -> None:
    conn.execute("INSERT INTO net.epoch_state (epoch_index, state, escrows, escrows_final) VALUES (%s, 'final', 0, 0)",
                 (epoch,))


def test_freezes_final_epochs_once_and_leaves_the_others(three_epochs):  # noqa: F811
    with psycopg.connect(three_epochs, autocommit=True) as conn:
        assert freeze_settled(conn).frozen == []  # 400-402 loaded from a file, none past the window yet
        _final(conn, EPOCHS[1])
        _burn_xids(three_epochs)
        first = freeze_settled(conn)
        assert set(first.frozen) == _epoch_partitions(conn, EPOCHS[1]) and first.skipped == []
        assert {t.split('"')[1].split("_e")[0] for t in first.frozen} >= {"rec_start_tx", "replay_inference"}
        for table in first.frozen:  # frozen up to this run: younger than the transactions burned before it
            assert _xid_age(conn, table) < BURNED_XIDS // 3, table
        for table in _epoch_partitions(conn, EPOCHS[2]):
            assert _xid_age(conn, table) >= BURNED_XIDS, table
        assert freeze_settled(conn).frozen == []  # once
        recorded = conn.execute("SELECT count(*), min(epoch_index), max(epoch_index) FROM net.frozen_partition"
                                ).fetchone()
        assert recorded == (len(first.frozen), EPOCHS[1], EPOCHS[1])


def test_a_settled_epoch_gets_statistics_at_the_servers_target(three_epochs):  # noqa: F811
    from indexer.db.quickstats import analyze_quickly

    def bounds(conn, table: str) -> int:  # histogram bounds of source_line, distinct in every row
        return conn.execute("SELECT cardinality(histogram_bounds::text::text[]) FROM pg_stats WHERE schemaname = "
                            "'part' AND tablename = %s AND attname = 'source_line'", (table,)).fetchone()[0]

    with psycopg.connect(three_epochs, autocommit=True) as conn:
        table = f"rec_start_tx_e{EPOCHS[1]}"
        assert conn.execute(f'SELECT count(DISTINCT source_line) FROM part."{table}"').fetchone()[0] > 101
        analyze_quickly(conn, [f'part."{table}"'])  # what a load leaves: the small sample (target 10)
        assert bounds(conn, table) == 11
        _final(conn, EPOCHS[1])
        freeze_settled(conn)
        assert bounds(conn, table) == 101  # default_statistics_target 100


def test_epochs_past_the_pruning_window_are_settled(three_epochs):  # noqa: F811
    with psycopg.connect(three_epochs, autocommit=True) as conn:
        # the poller has seen epoch 404: 400 and 401 are more than two epochs behind it, 402 is not
        conn.execute("INSERT INTO net.epoch_state (epoch_index, state, escrows, escrows_final) "
                     "VALUES (404, 'open', 0, 0)")
        frozen = set(freeze_settled(conn).frozen)
        assert frozen == _epoch_partitions(conn, EPOCHS[0]) | _epoch_partitions(conn, EPOCHS[1])


def test_a_partition_made_again_is_frozen_again(three_epochs):  # noqa: F811
    with psycopg.connect(three_epochs, autocommit=True) as conn:
        _final(conn, EPOCHS[0])
        first = freeze_settled(conn).frozen
        table = next(t for t in first if "rec_start_tx" in t)
        # what `indexer archive` then `indexer ingest` do to it: dropped, then made again (a new relation)
        conn.execute(f"DROP TABLE {table}")
        assert freeze_settled(conn).frozen == []
        assert conn.execute("SELECT count(*) FROM net.frozen_partition WHERE relname = %s",
                            (table.split('"')[1],)).fetchone()[0] == 0  # the dropped relation's marker is gone
        conn.execute("SELECT part.ensure_epochs(%s::bigint[], 0)", ([EPOCHS[0]],))
        assert freeze_settled(conn).frozen == [table]


def test_a_partition_another_session_holds_is_skipped_and_frozen_next_time(three_epochs):  # noqa: F811
    with psycopg.connect(three_epochs, autocommit=True) as conn, psycopg.connect(three_epochs) as other:
        _final(conn, EPOCHS[0])
        held = sorted(_epoch_partitions(conn, EPOCHS[0]))[0]
        other.execute(f"LOCK TABLE {held} IN SHARE UPDATE EXCLUSIVE MODE")  # what a running VACUUM holds
        first = freeze_settled(conn)
        assert first.skipped == [held] and held not in first.frozen
        assert set(first.frozen) == _epoch_partitions(conn, EPOCHS[0]) - {held}
        other.rollback()
        assert freeze_settled(conn).frozen == [held]


def test_a_partition_dropped_after_the_list_was_read_is_skipped(three_epochs, monkeypatch):  # noqa: F811
    with psycopg.connect(three_epochs, autocommit=True) as conn:
        _final(conn, EPOCHS[0])
        listed = conn.execute(freezing._SETTLED_UNFROZEN, {"window": 2}).fetchall()
        gone = sorted(_epoch_partitions(conn, EPOCHS[0]))[0]
        conn.execute(f"DROP TABLE {gone}")  # a concurrent `indexer archive`, between the list and its VACUUM
        monkeypatch.setattr(freezing, "_SETTLED_UNFROZEN", "SELECT * FROM (VALUES " + ", ".join(
            f"({relid}::oid, '{name}', {epoch}::bigint)" for relid, name, epoch in listed)
            + ") v(relid, relname, epoch_index) WHERE %(window)s::int IS NOT NULL")
        summary = freeze_settled(conn)
        assert summary.skipped == [gone]
        assert set(summary.frozen) == _epoch_partitions(conn, EPOCHS[0])


def test_needs_an_autocommit_connection(db_url):
    with psycopg.connect(db_url) as conn, pytest.raises(ValueError, match="autocommit"):
        freeze_settled(conn)


def test_the_run_job_survives_an_unreachable_database(caplog):
    job, interval, job_id = freeze_job("postgresql://nobody:secret@127.0.0.1:1/none?connect_timeout=2")
    assert job_id == "freeze" and interval > 0
    with caplog.at_level(logging.WARNING, logger="indexer.poller.freezing"):
        job()  # logs and returns: the scheduler's next run tries again
    assert "freezing settled epochs failed" in caplog.text and "secret" not in caplog.text


def test_indexer_run_schedules_the_job_beside_the_cycle(monkeypatch, db_url):
    from indexer.poller import schedule

    scheduled = []
    monkeypatch.setattr(schedule, "run_jobs", lambda jobs: scheduled.extend(job_id for _, _, job_id in jobs))
    from indexer.cli import main

    assert main(["--database-url", db_url, "run", "--no-alerts", "--metrics-addr", "off",
                 "--gonka-chain-rest-url", "http://127.0.0.1:1/chain-api",
                 "--gonka-rpc-url", "http://127.0.0.1:1/chain-rpc"]) == 0
    assert scheduled[:2] == ["poll", "freeze"]

"""Partitioned history (docs/partitioning.md): tx rows routed to their escrow's epoch partition whatever the load
order, the DEFAULT safety net emptied when a partition is made, partition pruning for the api views analysts filter
by epoch, and migration 0014 converting a database with data and back."""
from __future__ import annotations

import json

import psycopg
import pytest

from indexer.db import migrate
from indexer.load.partitions import PARTITIONS_AHEAD, ensure_ahead
from indexer.downstream import process_changes
from tests.support.helpers import LOAD_TIMES, db_state, escrow, ingest, tx, write_lines
from tests.support.partition_kit import plan_relations
from indexer.rules.run import EPOCHS_PER_CLAIM
from tests.support.rules_kit import GOV, Log, fam3, gov_snapshot, load, stored



def _placement(conn, table: str) -> dict[str, int]:
    """Rows per partition of a partitioned table."""
    return dict(conn.execute(f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1").fetchall())


def _txs(escrow_id: str) -> list[dict]:
    return [tx("start", 1, 1, escrow_id, prompt_hash="ab" * 16, max_tokens=100, input_length=10),
            tx("confirm_start", 1, 2, escrow_id),
            tx("finish", 1, 3, escrow_id, executor_slot=1, input_tokens=10, output_tokens=20)]


def test_txs_before_their_escrow_move_to_its_epoch(db_url, tmp_path, conn):
    ingest(db_url, write_lines(tmp_path / "txs.ndjson", _txs("7")))
    assert _placement(conn, "rec.start_tx") == {"part.rec_start_tx_unassigned": 1}
    assert conn.execute("SELECT epoch_index FROM rec.escrow_epoch WHERE escrow_id = '7'").fetchone() == (-1,)

    ingest(db_url, write_lines(tmp_path / "escrow.ndjson", [escrow("7", epoch=500)]))
    conn.rollback()
    for table in ("start_tx", "confirm_start_tx", "finish_tx"):
        assert _placement(conn, f"rec.{table}") == {f"part.rec_{table}_e500": 1}
    # the loader made the partitions its batch needed, no more; those ahead of need come after the load
    ahead = 500 + PARTITIONS_AHEAD
    assert conn.execute(f"SELECT to_regclass('part.rec_finish_tx_e{ahead}') IS NULL").fetchone() == (True,)
    process_changes(conn, db_url)
    assert conn.execute(f"SELECT to_regclass('part.rec_finish_tx_e{ahead}') IS NOT NULL").fetchone() == (True,)
    assert conn.execute(f"SELECT to_regclass('part.replay_inference_e{ahead}') IS NOT NULL").fetchone() == (True,)
    assert conn.execute(f"SELECT to_regclass('part.rec_finish_tx_e{ahead + 1}') IS NULL").fetchone() == (True,)
    assert ensure_ahead(conn) == 0  # idempotent
    assert conn.execute("SELECT status, epoch_index FROM api.inferences").fetchall() == [("Finished", 500)]

    # an amendment of a moved tx is still an amendment of the one row (the key is unique across partitions)
    summary = ingest(db_url, write_lines(tmp_path / "amend.ndjson", [
        tx("finish", 1, 3, "7", executor_slot=1, input_tokens=10, output_tokens=25)]))
    conn.rollback()
    assert (summary.amended, summary.loaded) == (1, 0)
    assert conn.execute("SELECT output_tokens, revision FROM rec.finish_tx").fetchall() == [(25, 2)]


def test_escrow_amended_to_another_epoch_takes_its_rows(db_url, tmp_path, conn):
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [escrow("8", epoch=600), *_txs("8")]))
    assert _placement(conn, "rec.finish_tx") == {"part.rec_finish_tx_e600": 1}
    ingest(db_url, write_lines(tmp_path / "b.ndjson", [escrow("8", epoch=601)]))
    conn.rollback()
    assert _placement(conn, "rec.finish_tx") == {"part.rec_finish_tx_e601": 1}
    assert _placement(conn, "replay.inference") == {"part.replay_inference_e601": 1}
    # reloading the first file amends the escrow back, and its txs follow it again
    ingest(db_url, write_lines(tmp_path / "c.ndjson", [escrow("8", epoch=600), *_txs("8")]))
    conn.rollback()
    assert _placement(conn, "rec.start_tx") == {"part.rec_start_tx_e600": 1}
    assert conn.execute("SELECT count(*) FROM rec.start_tx").fetchone() == (1,)


# Both ways, with the old and the new epoch in different claims of the rules stage (EPOCHS_PER_CLAIM epochs each,
# lowest first): moved to an earlier epoch, the new epoch's claim runs first and only the partitions of the escrow's
# previous findings (indexer.rules.run._PARTS) reach its old rows; the old epoch, claimed next, no longer knows it.
@pytest.mark.parametrize("old, new, invalidated", [
    (408, 420, False), (420, 408, False), (408, 420, True),
    # rules.challenge is rebuilt per epoch: the escrow's old challenge row stays until the old epoch's claim, so
    # 60_disputable.sql joins it on the refusal's own epoch (joined on every epoch of `parts`, the refusal met both
    # rows and the MERGE inserted the same disputable row twice)
    (420, 408, True),
])
def test_escrow_amended_to_another_epoch_takes_its_rule_findings(db_url, tmp_path, conn, old, new, invalidated):
    # a 0/0 Finish whose executor's text shows the request over the governance limit (an over_limit refusal);
    # invalidated, a disputable penalty besides the refusal's verdict
    log = Log("mv", epoch=old)
    refused = log.refusal(5, max_tokens=4096, payload=stored(fam3(GOV, GOV - 4095)))
    if invalidated:
        log.invalidate(refused)
    findings = _FINDINGS + (("rules.disputable",) if invalidated else ())
    load(db_url, tmp_path, [gov_snapshot(epoch=408), gov_snapshot(epoch=420), *log.records], name="a.ndjson")
    assert _findings(conn, "mv", findings) == {table: {old} for table in findings}
    assert conn.execute("SELECT epoch_index, inference_id, verdict FROM api.context_refusals").fetchall() == [
        (old, refused, "over_limit")]

    # the escrow, amended, and epochs from 409 up that fill the claim of epoch 408, so epoch 420 waits for the next
    fill = [gov_snapshot(epoch=e) for e in range(409, 408 + EPOCHS_PER_CLAIM)]
    load(db_url, tmp_path, [dict(log.records[0], epoch_index=new), *fill], name="b.ndjson")
    conn.rollback()
    # every finding is under the new epoch only: none left in the old epoch's partitions
    assert _findings(conn, "mv", findings) == {table: {new} for table in findings}
    assert conn.execute("SELECT epoch_index, inference_id, verdict FROM api.context_refusals").fetchall() == [
        (new, refused, "over_limit")]
    assert _placement(conn, "rules.context_refusal") == {f"part.rules_context_refusal_e{new}": 1}


_FINDINGS = ("rules.escrow_limit", "rules.context_refusal")


def _findings(conn, escrow_id: str, tables) -> dict[str, set[int]]:
    """The epochs an escrow's findings are under, per rules table."""
    return {table: {r[0] for r in conn.execute(f"SELECT epoch_index FROM {table} WHERE escrow_id = %s", (escrow_id,))}
            for table in tables}


def test_one_batch_mixing_epochs_routes_each_row(db_url, tmp_path, conn):
    records = [escrow("10", epoch=700), escrow("11", epoch=701), *_txs("10"), *_txs("11"), *_txs("12")]
    ingest(db_url, write_lines(tmp_path / "mixed.ndjson", records))
    assert _placement(conn, "rec.start_tx") == {"part.rec_start_tx_e700": 1, "part.rec_start_tx_e701": 1,
                                                "part.rec_start_tx_unassigned": 1}
    assert conn.execute("SELECT escrow_id, epoch_index FROM rec.start_tx ORDER BY 1").fetchall() == [
        ("10", 700), ("11", 701), ("12", -1)]


def test_rows_in_the_default_partition_move_out_when_their_partition_is_made(conn):
    conn.execute("INSERT INTO rec.finish_tx (escrow_id, inference_id, epoch_index, source_id, source_line) "
                 "VALUES ('9', 1, 900, 0, 1)")
    assert _placement(conn, "rec.finish_tx") == {"part.rec_finish_tx_default": 1}
    created = conn.execute("SELECT part.ensure_epochs(ARRAY[900]::bigint[], 1)").fetchone()[0]
    assert created == 2 * conn.execute("SELECT count(*) FROM pg_partitioned_table").fetchone()[0]
    assert _placement(conn, "rec.finish_tx") == {"part.rec_finish_tx_e900": 1}
    assert conn.execute("SELECT part.ensure_epochs(ARRAY[900]::bigint[], 1)").fetchone() == (0,)  # idempotent


LAST_EPOCH = 2 ** 63 - 1  # the largest epoch_index a record can carry


def test_the_largest_epoch_gets_its_partition_and_the_views_read_it(db_url, tmp_path, conn):
    # its partition's upper bound is MAXVALUE (not e + 1, which overflows), and no epoch is made ahead of it; an
    # escrow of it stored, later loads (whose ensure_ahead starts from the largest epoch) still go on
    outcome = {"kind": "participant_epoch", "epoch_index": LAST_EPOCH, "participant": "gonka1hostA", "weight": 10}
    params = {"kind": "epoch_params", "epoch_index": LAST_EPOCH, "validation_params": {}, "params_exact": True}
    ingest(db_url, write_lines(tmp_path / "last.ndjson", [escrow("13", epoch=LAST_EPOCH), *_txs("13"), outcome,
                                                          params]), rules=True)
    assert _placement(conn, "rec.finish_tx") == {f"part.rec_finish_tx_e{LAST_EPOCH}": 1}
    assert conn.execute("SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = %s",
                        (f"rec_finish_tx_e{LAST_EPOCH}",)).fetchone() == (
        f"FOR VALUES FROM ('{LAST_EPOCH}') TO (MAXVALUE)",)
    assert ensure_ahead(conn) == 0
    ingest(db_url, write_lines(tmp_path / "next.ndjson", [escrow("14", epoch=700), *_txs("14")]), rules=True)
    conn.rollback()
    assert conn.execute("SELECT escrow_id, epoch_index, status FROM api.inferences ORDER BY 1").fetchall() == [
        ("13", LAST_EPOCH, "Finished"), ("14", 700, "Finished")]
    for (view,) in conn.execute("SELECT table_schema || '.' || table_name FROM information_schema.views "
                                "WHERE table_schema = 'api'").fetchall():
        conn.execute(f"SELECT * FROM {view}").fetchall()  # every column: none computes past the last epoch
    assert conn.execute("SELECT params_changed_by_next_epoch FROM api.restitution_outcomes WHERE epoch_index = %s",
                        (LAST_EPOCH,)).fetchall()


@pytest.mark.parametrize("view, partitioned", [
    ("api.disputable_penalties", {"rules_disputable"}),
    ("api.context_refusals", {"rules_context_refusal"}),
    ("api.inferences", {"replay_inference", "rec_start_tx", "rec_finish_tx"}),
    ("api.host_epoch_penalties", {"rules_disputable"}),
])
def test_one_epoch_query_reads_one_partition_per_table(three_epochs, view, partitioned):
    with psycopg.connect(three_epochs) as c:
        assert c.execute(f"SELECT count(*) FROM {view} WHERE epoch_index = 401").fetchone()[0] > 0
        plan = c.execute(f"EXPLAIN (FORMAT JSON, VERBOSE) SELECT * FROM {view} WHERE epoch_index = 401").fetchone()[0]
        partitions = [r for r in plan_relations(plan) if r.startswith("part.")]
    # every partitioned table the view reads is read in epoch 401's partition only (pruned at plan time)
    assert set(partitions) == {f"part.{table}_e401" for table in partitioned}, json.dumps(plan)[:3000]


# what migrations after 0013 add to rec/replay: tables, and columns of older tables
LATER_TABLES = {"rec.signed_diff", "rec.settlement", "replay.escrow_verification", "rec.warm_key"}
LATER_COLUMNS = {"creator", "amount", "token_price", "create_devshard_fee", "fee_per_nonce",  # rec.escrow (0029)
                 "inference_seal_grace_nonces", "inference_seal_grace_seconds", "auto_seal_every_n_nonces",
                 "max_nonce", "refusal_timeout", "execution_timeout"}  # rec.escrow (0033)


def test_migration_converts_data_and_back(three_epochs):
    tables_before = db_state(three_epochs)
    migrate.downgrade(three_epochs, "0013_poller_leases")
    at_0013 = db_state(three_epochs)
    assert "rec.escrow_epoch" not in at_0013
    routed = {"rec.start_tx", "rec.confirm_start_tx", "rec.finish_tx", "rec.validation_tx", "rec.validation_vote_tx",
              "rec.timeout_tx", "rec.error_miss_tx", "rec.host_stats"}
    assert set(at_0013) == set(tables_before) - {"rec.escrow_epoch"} - LATER_TABLES
    migrate.upgrade(three_epochs)
    older = db_state(three_epochs, exclude=LOAD_TIMES | LATER_COLUMNS, tables=sorted(at_0013))
    migrate.downgrade(three_epochs, "0013_poller_leases")
    for table, rows in at_0013.items():  # the same rows; the record tables without the routing column (the last)
        assert rows == ([r[:-1] for r in older[table]] if table in routed else older[table]), table
    with psycopg.connect(three_epochs) as c:
        assert c.execute("SELECT count(*) FROM pg_partitioned_table").fetchone() == (0,)
        assert c.execute("SELECT count(*) FROM rec.finish_tx").fetchone()[0] > 0
    migrate.upgrade(three_epochs)
    after = db_state(three_epochs)
    # derived by the verification stage, dropped by the downgrade and created empty by 0029: the next replay refills it
    assert after.pop("replay.escrow_verification") == []
    assert after == {t: rows for t, rows in tables_before.items() if t != "replay.escrow_verification"}
    with psycopg.connect(three_epochs) as c:
        assert c.execute("SELECT count(*) FROM part.rec_finish_tx_default").fetchone() == (0,)
        assert c.execute("SELECT count(*) FROM part.rec_finish_tx_e400").fetchone()[0] > 0

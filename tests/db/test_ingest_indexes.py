"""The indexes the ingest writes: every one beside a primary key on the tables a load and its replay fill has a query
that needs it (migration 0036 dropped the one nothing read), and the lookups the dropped one could have served still
plan as a probe of the primary key."""
from __future__ import annotations

# index -> the query that reads it (a new index on these tables is paid for on every load: name its reader here)
NEEDED = {
    "ix_start_tx_sibling_key": "fn.sibling_finishes: the Starts of an escrow with one prompt hash (sql/functions)",
    "ix_finish_tx_escrow_id_zero_zero": "the 0/0 Finishes of an escrow (sql/rules/20_context_refusals.sql, "
                                        "indexer/rules/run.py payload parse)",
    "ix_inference_epoch_index_challenged": "an epoch's challenged inferences (sql/rules/50_challenges.sql)",
    "ix_inference_epoch_index_timed_out": "an epoch's timed-out inferences (sql/rules/60_disputable.sql)",
}
INGEST_TABLES = ("rec.start_tx", "rec.confirm_start_tx", "rec.finish_tx", "rec.validation_tx",
                 "rec.validation_vote_tx", "rec.timeout_tx", "rec.error_miss_tx", "rec.host_stats",
                 "replay.inference", "replay.vote", "replay.rejected_tx", "replay.slot_stats", "replay.escrow")


def test_every_secondary_index_of_the_ingest_tables_has_a_reader(conn):
    rows = conn.execute(
        "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "WHERE x.indrelid = ANY(%s::regclass[]) AND NOT x.indisprimary ORDER BY 1", (list(INGEST_TABLES),))
    assert sorted(r[0] for r in rows) == sorted(NEEDED)


def _nodes(conn, sql: str, params=()) -> list[dict]:
    """Every node of the statement's plan."""
    out, todo = [], [conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchone()[0][0]["Plan"]]
    while todo:
        node = todo.pop()
        out.append(node)
        todo.extend(node.get("Plans", []))
    return out


def test_one_escrows_rejections_are_a_primary_key_range(conn):
    conn.execute("INSERT INTO replay.rejected_tx (escrow_id, ordinal, diff_nonce, kind, inference_id, slot, reason, "
                 "ignored) SELECT 'escrow-' || (g / 20), g % 20, g, 'finish', g % 7, 0, 'unknown_record', false "
                 "FROM generate_series(1, 40000) g")
    conn.execute("ANALYZE replay.rejected_tx")
    for sql in ("SELECT * FROM api.replay_rejections WHERE escrow_id = %s AND inference_id = 3",
                "SELECT * FROM api.replay_rejections WHERE escrow_id = %s"):
        nodes = _nodes(conn, sql, ("escrow-77",))
        assert any(n.get("Index Name") == "pk_rejected_tx" for n in nodes), nodes
        assert not any(n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "rejected_tx" for n in nodes), nodes
    got = conn.execute("SELECT count(*) FROM api.replay_rejections WHERE escrow_id = 'escrow-77' AND inference_id = 3"
                       ).fetchone()[0]
    assert got == sum(1 for g in range(1540, 1560) if g % 7 == 3)

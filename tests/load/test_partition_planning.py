"""The partitioned history's costs (docs/partitioning.md): every rules statement, planned for one epoch as the rules
stage plans it, keeps only that epoch's partitions (pruned when planned, not while running), the statistics after a
load are refreshed in the epoch partitions written, not in the parents, and a one-epoch batch is written to its
partition."""
from __future__ import annotations

import psycopg

from indexer.db.quickstats import BULK_STATISTICS_TARGET
from indexer.load.partitions import EpochRouter, analyze_epochs
from indexer.rules import run as rules_run
from tests.support.partition_kit import EPOCHS, plan_partitions


def test_each_rules_statement_planned_for_one_epoch_keeps_that_epochs_partitions(three_epochs):
    epoch = EPOCHS[1]
    with psycopg.connect(three_epochs) as conn:
        conn.execute(rules_run._SETTINGS)
        escrows = [r[0] for r in conn.execute("SELECT escrow_id FROM rec.escrow WHERE epoch_index = %s", (epoch,))]
        seen = set()
        for scoped in (False, True):  # the epoch whole, and only the changed escrows' rows (indexer.rules.run)
            params = {"epochs": [epoch], "escrows": escrows, "parts": [epoch], "version": rules_run.RULE_VERSION,
                      "scoped": scoped}
            for name, statement in rules_run.rule_statements():
                plan = conn.execute("EXPLAIN (FORMAT JSON, VERBOSE) " + statement, params,
                                    prepare=False).fetchone()[0]
                partitions = plan_partitions(plan)
                assert all(p.endswith(f"_e{epoch}") for p in partitions), (name, scoped, sorted(partitions))
                seen |= partitions
        conn.rollback()
    # the statements together read every partitioned table the rules use, each in the epoch's partition only
    assert {f"rec_{t}_e{epoch}" for t in ("start_tx", "finish_tx", "error_miss_tx", "timeout_tx", "validation_tx",
                                          "validation_vote_tx")} <= seen
    assert {f"rules_{t}_e{epoch}" for t in ("context_refusal", "sibling_finding", "challenge", "disputable")} <= seen
    assert f"replay_inference_e{epoch}" in seen


def test_analyze_after_a_load_refreshes_the_written_partitions_not_the_parent(three_epochs):
    with psycopg.connect(three_epochs, autocommit=True) as conn:
        def statistics(table: str) -> int:
            return conn.execute("SELECT count(*) FROM pg_statistic WHERE starelid = %s::regclass",
                                (table,)).fetchone()[0]

        # start from none (autovacuum never analyses a partitioned parent, so the parent's stay none)
        conn.execute("DELETE FROM pg_statistic WHERE starelid = ANY(ARRAY['rec.finish_tx', "
                     "'part.rec_finish_tx_e401', 'part.rec_finish_tx_e402']::regclass[])")
        target = conn.execute("SHOW default_statistics_target").fetchone()[0]
        analyze_epochs(conn, "rec.finish_tx", [401])
        assert statistics("part.rec_finish_tx_e401") > 0
        assert statistics("rec.finish_tx") == 0
        # with the bulk load's small sample (indexer.db.quickstats), and the setting does not outlive it
        analyze_epochs(conn, "rec.finish_tx", [401, 402])
        assert conn.execute("SHOW default_statistics_target").fetchone()[0] == target
        bounds = conn.execute("SELECT cardinality(histogram_bounds::text::text[]) FROM pg_stats "
                              "WHERE schemaname = 'part' AND tablename = 'rec_finish_tx_e402' "
                              "AND attname = 'inference_id'").fetchone()[0]
        assert bounds == BULK_STATISTICS_TARGET + 1  # 480 distinct ids: a full histogram at the small target
        assert statistics("rec.finish_tx") == 0


def test_a_one_epoch_batch_is_written_to_its_partition_and_a_dropped_one_to_the_parent(conn):
    conn.execute("SELECT part.ensure_epochs(ARRAY[800]::bigint[], 0)")
    targets = EpochRouter.targets(conn, {"a": 800, "b": 800})
    assert targets["finish"] == "part.rec_finish_tx_e800" and targets["start"] == "part.rec_start_tx_e800"
    assert EpochRouter.targets(conn, {"a": -1})["finish"] == "part.rec_finish_tx_unassigned"
    assert EpochRouter.targets(conn, {"a": 800, "b": 801})["finish"] == "rec.finish_tx"  # two epochs: routed
    conn.execute("DROP TABLE part.rec_finish_tx_e800")  # as `archive` does; a loader may still think it exists
    targets = EpochRouter.targets(conn, {"a": 800})
    assert targets["finish"] == "rec.finish_tx" and targets["start"] == "part.rec_start_tx_e800"


def test_a_sibling_lookup_probes_the_hash_index_of_escrow_and_prompt(three_epochs):
    # migration 0016: fn.sibling_finishes states the indexed expression, so in a large escrow a lookup is one hash
    # probe in the epoch's partition rather than a walk over the escrow's Starts (a small escrow may be walked: the
    # planner's choice). 20,000 more Starts in the escrow, in this transaction only, make it large.
    epoch = EPOCHS[1]
    with psycopg.connect(three_epochs) as conn:
        escrow_id, prompt_hash, inference_id = conn.execute(
            "SELECT escrow_id, prompt_hash, inference_id FROM rec.start_tx WHERE epoch_index = %s AND prompt_hash <> '' "
            "LIMIT 1", (epoch,)).fetchone()
        conn.execute("INSERT INTO rec.start_tx (escrow_id, inference_id, diff_nonce, prompt_hash, epoch_index, "
                     "source_id, source_line) SELECT %s, 10000000 + g, g, md5(g::text), %s, "
                     "(SELECT min(source_id) FROM rec.source), g FROM generate_series(1, 20000) g", (escrow_id, epoch))
        conn.execute(f"ANALYZE part.rec_start_tx_e{epoch}")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT * FROM fn.sibling_finishes(%s, %s, %s, %s::bigint[])",
            (escrow_id, prompt_hash, inference_id, [epoch]), prepare=False))
        index = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE '%%USING hash%%'",
                             (f"rec_start_tx_e{epoch}",)).fetchone()[0]
        assert f"using {index} on rec_start_tx_e{epoch}" in plan, plan
        assert "Index Cond: (((escrow_id || '/'::text) || prompt_hash) =" in plan, plan
        # the function still finds exactly the Finished siblings of the same escrow and prompt
        got = {r[0] for r in conn.execute("SELECT sibling_inference_id FROM fn.sibling_finishes(%s, %s, %s, %s)",
                                          (escrow_id, prompt_hash, inference_id, [epoch]))}
        want = {r[0] for r in conn.execute(
            "SELECT s.inference_id FROM rec.start_tx s JOIN rec.finish_tx f USING (escrow_id, inference_id) "
            "WHERE s.escrow_id = %s AND s.prompt_hash = %s AND s.inference_id <> %s", (escrow_id, prompt_hash,
                                                                                     inference_id))}
        assert got == want
        conn.rollback()


def test_analyze_after_a_load_skips_a_partition_autovacuum_holds_and_the_rules_stage_analyses_it(db_url, tmp_path,
                                                                                                 monkeypatch):
    """Autovacuum vacuuming a partition holds SHARE UPDATE EXCLUSIVE on it; the load's ANALYZE must not wait for it
    (indexer.db.quickstats) but hand it on, and the rules stage analyses it before it plans."""
    from indexer.load import summary as summary_module
    from indexer.load.ingest import ingest_paths
    from indexer.downstream import process_changes
    from indexer.synth import generate, write_ndjson

    epoch = 900
    path = tmp_path / "one_epoch.ndjson"
    write_ndjson(str(path), generate(seed=5, escrows=3, inferences=60, epochs=1, first_epoch=epoch))
    monkeypatch.setattr(summary_module, "ANALYZE_AFTER_ROWS", 1)  # analyse every kind the small file grew
    finish, start = f"part.rec_finish_tx_e{epoch}", f"part.rec_start_tx_e{epoch}"
    with psycopg.connect(db_url, autocommit=True) as admin, psycopg.connect(db_url) as vacuum:
        admin.execute("SELECT part.ensure_epochs(%s::bigint[], 0)", ([epoch],))
        vacuum.execute(f"LOCK TABLE {finish} IN SHARE UPDATE EXCLUSIVE MODE")  # the lock autovacuum takes
        # a load that waited for the lock would fail here instead of hanging
        summary = ingest_paths(db_url + ("&" if "?" in db_url else "?") + "options=-c%20lock_timeout%3D5000",
                               [str(path)])
        assert summary.deferred_analyze.tables == [finish]
        assert summary.deferred_analyze.since is not None

        def statistics(table: str) -> int:
            return admin.execute("SELECT count(*) FROM pg_statistic WHERE starelid = %s::regclass",
                                 (table,)).fetchone()[0]

        assert statistics(finish) == 0 and statistics(start) > 0
        vacuum.rollback()  # autovacuum is done with it
        with psycopg.connect(db_url) as conn:
            downstream = process_changes(conn, db_url, deferred_analyze=summary.deferred_analyze)
        assert downstream.rules.epochs == 1
        assert statistics(finish) > 0


def test_rec_epoch_partitions_leave_their_analyze_to_the_loader(conn):
    """Autovacuum's ANALYZE of a rec partition still being filled was overwritten by the load's own (migration
    0020): a rec epoch partition is made with autovacuum's analyze threshold out of reach; the replay's and the
    rules' partitions, and the unassigned and default ones, keep autovacuum's."""
    conn.execute("SELECT part.ensure_epochs(%s::bigint[], 0)", ([950],))
    options = dict(conn.execute(
        "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'part' AND c.relkind = 'r'").fetchall())
    epoch_950 = {name: opts for name, opts in options.items() if name.endswith("_e950")}
    rec = [name for name in epoch_950 if name.startswith("rec_")]
    assert len(rec) >= 8 and all(epoch_950[name] == ["autovacuum_analyze_threshold=2147483647"] for name in rec)
    assert all(opts is None for name, opts in epoch_950.items() if not name.startswith("rec_"))
    unassigned_and_default = [name for name in options if name.endswith(("_unassigned", "_default"))]
    assert len(unassigned_and_default) >= 2 * len(rec)
    assert all(options[name] is None for name in unassigned_and_default)


def test_the_loader_analyses_a_written_partition_when_autovacuum_would(db_url, tmp_path):
    """The loader applies autovacuum's ANALYZE rule to the rec partitions it writes, whatever the size of the load
    (a poll cycle's trickle included): a partition without statistics, or grown by a tenth since them, is
    analysed; one that a load left as it was is not."""
    import json

    from indexer.load.ingest import ingest_paths
    from indexer.load.summary import ANALYZE_AFTER_ROWS
    from indexer.synth import generate

    epoch = 950
    records = list(generate(seed=5, escrows=2, inferences=60, epochs=1, first_epoch=epoch))
    first, second = sorted({r["escrow_id"] for r in records if r.get("escrow_id")})

    def file(name: str, escrow: str):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in records if r.get("escrow_id", escrow) == escrow))
        return str(path)

    def analyses() -> int:  # manual ANALYZEs are counted in shared memory at once (not flushed later)
        with psycopg.connect(db_url) as c:
            return c.execute("SELECT analyze_count FROM pg_stat_all_tables "
                             "WHERE relid = 'part.rec_start_tx_e950'::regclass").fetchone()[0]

    a, b = file("a.ndjson", first), file("b.ndjson", second)
    summary = ingest_paths(db_url, [a])
    assert 0 < summary.by_kind["start"] < ANALYZE_AFTER_ROWS and analyses() == 1  # no statistics yet
    ingest_paths(db_url, [a])  # the same records again: nothing changed
    assert analyses() == 1
    ingest_paths(db_url, [b])  # another escrow of the epoch: twice the rows
    assert analyses() == 2


def test_an_empty_written_partition_is_not_analysed_again_and_again(conn):
    from indexer.load.partitions import analyze_written

    conn.execute("SELECT part.ensure_epochs(%s::bigint[], 0)", ([951],))
    before = conn.execute("SELECT analyze_count FROM pg_stat_all_tables "
                          "WHERE relid = 'part.rec_timeout_tx_e951'::regclass").fetchone()[0]
    analyze_written(conn, ["rec.timeout_tx"], {951})  # a load that wrote timeouts of other epochs only
    assert conn.execute("SELECT analyze_count FROM pg_stat_all_tables "
                        "WHERE relid = 'part.rec_timeout_tx_e951'::regclass").fetchone()[0] == before

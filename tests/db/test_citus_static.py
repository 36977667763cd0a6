"""The road to Citus, checked without Citus (docs/scale.md "The road to Citus"): every table is placed once in sql/citus/, the escrow
facts are distributed by escrow_id and co-located, their keys include escrow_id, and every join between distributed
tables in sql/rules/, sql/views/, sql/alerts/ and the SQL functions equates their distribution columns
(tests/support/citus_check.py). The negative tests show the checker fails on what it must catch."""
from __future__ import annotations


import pytest

from indexer.db.paths import MIGRATIONS_DIR, SQL_DIR
from indexer.db.schema import replaceable_object_files
from indexer.rules.run import rule_statements
from tests.support import citus_check as cc

TABLES = cc.migration_tables(MIGRATIONS_DIR / "versions")
PLACEMENTS = cc.load_placements(SQL_DIR / "citus", cc.foreign_key_graph(TABLES))
FUNCTIONS = cc.load_functions(SQL_DIR / "functions")
ANCHOR = "rec.escrow"

# Tables with an escrow_id column that are deliberately not distributed by it, and why (docs/scale.md, Citus).
NOT_DISTRIBUTED_BY_ESCROW = {
    "rules.suspect": ("reference", "read across escrows: a suspect found in one escrow discounts its votes in all"),
    "replay.dirty_escrow": ("local", "a work queue claimed with FOR UPDATE SKIP LOCKED on the coordinator"),
    "rules.dirty_escrow": ("local", "a work queue claimed per epoch on the coordinator"),
    "net.awaited_payload": ("local", "a work queue of missing payloads claimed with FOR UPDATE SKIP LOCKED"),
}


def catalog() -> cc.Catalog:
    """A fresh catalog (views are registered as statements create them)."""
    return cc.Catalog(PLACEMENTS, {t: d.columns for t, d in TABLES.items()}, FUNCTIONS)


def view_catalog() -> cc.Catalog:
    """The catalog with every api view registered, as after `indexer migrate`."""
    cat = catalog()
    for path in sorted((SQL_DIR / "views").glob("*.sql")):
        cc.check_sql(cat, path.name, path.read_text())
    return cat


def findings(sql: str, cat: cc.Catalog | None = None) -> list[str]:
    return [f.message for f in cc.check_sql(cat or catalog(), "test", sql)]


# ---- placement: one definition, every table ----------------------------------------------------------------------

def test_every_table_of_the_migrations_is_placed_exactly_once():
    assert sorted(set(TABLES) - set(PLACEMENTS)) == [], "tables with no placement in sql/citus/"
    assert sorted(set(PLACEMENTS) - set(TABLES)) == [], "placements of tables no migration creates"


def test_escrow_keyed_tables_are_distributed_by_escrow_id_and_co_located():
    escrow_keyed = [t for t, ddl in TABLES.items() if "escrow_id" in ddl.columns]
    assert len(escrow_keyed) >= 20
    for table in escrow_keyed:
        placement = PLACEMENTS[table]
        if table in NOT_DISTRIBUTED_BY_ESCROW:
            assert placement.kind == NOT_DISTRIBUTED_BY_ESCROW[table][0], table
        else:
            assert placement == cc.Placement("distributed", "escrow_id", ANCHOR), table


def test_distribution_columns_exist_and_keys_include_them():
    for table, placement in PLACEMENTS.items():
        if placement.kind != "distributed":
            continue
        ddl = TABLES[table]
        assert placement.column in ddl.columns, table
        for kind, columns in ddl.keys:  # Citus: a PRIMARY KEY / UNIQUE of a distributed table includes the column
            assert placement.column in columns, f"{table}: {kind} ({', '.join(columns)})"


def test_every_table_has_a_key_or_a_replica_identity():
    """Node changes copy shards with logical replication, which refuses UPDATE/DELETE without a replica identity."""
    missing = [t for t, ddl in TABLES.items()
               if not any(kind == "CONSTR_PRIMARY" for kind, _ in ddl.keys) and ddl.replica_identity is None]
    assert missing == []
    assert TABLES["rules.suspect"].replica_identity == "f"  # 0012_citus_ready


def test_sql_citus_is_not_applied_by_indexer_migrate():
    assert not [p for p in replaceable_object_files() if p.parent.name == "citus"]


def test_the_static_catalog_matches_the_migrated_database(conn):
    """The checker's columns come from the migrations' DDL; they must be the database's own."""
    rows = conn.execute("""
        SELECT c.table_schema || '.' || c.table_name, array_agg(c.column_name::text ORDER BY c.ordinal_position)
        FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
        WHERE t.table_type = 'BASE TABLE' AND c.table_schema IN ('rec', 'replay', 'rules', 'net', 'alert', 'chain')
        GROUP BY 1""").fetchall()
    assert {name: columns for name, columns in rows} == {t: d.columns for t, d in TABLES.items()}
    identity = conn.execute("SELECT relreplident FROM pg_class WHERE oid = 'rules.suspect'::regclass").fetchone()[0]
    assert identity == "f"


# ---- the project's SQL -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted({name for name, _ in rule_statements()}))
def test_rules_statements_join_distributed_tables_on_escrow_id(name):
    cat = catalog()
    found = [str(f) for file, statement in rule_statements() if file == name
             for f in cc.check_sql(cat, f"sql/rules/{file}", statement)]
    assert found == []


def test_views_and_alert_rules_join_distributed_tables_on_escrow_id():
    cat = catalog()
    found = []
    for path in sorted((SQL_DIR / "views").glob("*.sql")) + sorted((SQL_DIR / "alerts").glob("*.sql")):
        found += [str(f) for f in cc.check_sql(cat, f"sql/{path.parent.name}/{path.name}", path.read_text())]
    assert found == []
    assert "api.policy_penalties" in cat.views  # the views were seen, and later ones read them through the catalog


def test_sql_functions_join_on_escrow_id_and_none_hides_a_distributed_table():
    inlinable = [fn for fn in FUNCTIONS.values() if fn.query is not None]
    assert {"fn.sibling_finishes", "fn.largest_sibling"} <= {fn.name for fn in inlinable}
    assert [str(f) for fn in inlinable for f in cc.check_function(catalog(), fn).findings] == []
    assert [str(f) for f in cc.opaque_function_findings(catalog())] == []


def test_epoch_level_aggregates_are_recognised_as_intermediate_results():
    """api.host_epoch_penalties joins per-host sums (grouped by epoch and participant), not escrow rows: Citus
    computes each sum first, so the join on (epoch, participant) is not a join between distributed tables."""
    cat = view_catalog()
    stmt = cc.statements_of("SELECT * FROM api.host_epoch_penalties")[0]
    analyzer = cc.check_statement(cat, "test", stmt)
    assert analyzer.findings == []
    assert {label for label, _ in analyzer.intermediates} == {"CTE recorded r", "CTE disputed d"}


# Where the project's SQL makes Citus compute a part first (an intermediate result, read by the rest like a
# reference table): each is small or epoch-level by design. A new one fails this test, so that choosing to move rows
# to the coordinator is deliberate: (file, intermediate) -> why it is acceptable.
INTERMEDIATES = {
    ("rules/10_limits.sql", "any subquery"): "the epochs of the claimed escrows (a handful of numbers)",
    ("rules/10_limits.sql", "subquery esc"): "one escrow limit per (epoch, model) of the claimed epochs",
    ("rules/10_limits.sql", "the right branch of a set operation"): "the (epoch, model) keys of the claimed epochs",
    ("views/40_rules.sql", "CTE recorded r"): "replay counters summed per (epoch, host)",
    ("views/40_rules.sql", "CTE disputed d"): "disputable counts per (epoch, host)",
    ("views/60_restitution.sql", "the right branch of a set operation"): "the epochs that have replayed escrows",
    ("views/60_restitution.sql", "view api.restitution_steps restitution_steps"):
        "settlement order per (epoch, variant, host): a window over hosts' escrow rows, not over inferences",
    ("views/60_restitution.sql", "CTE settled_late sl"):
        "escrows settled after their epoch, per (epoch, host): a few ids from the escrow rows, not from inferences",
    ("views/61_restitution_impact.sql", "view api.restitution_steps restitution_steps"):
        "as in 60_restitution.sql (api.restitution_impact reads api.restitution_outcomes)",
    ("views/61_restitution_impact.sql", "CTE settled_late sl"): "as in 60_restitution.sql",
    ("alerts/disputable_penalty.sql", "subquery per_rule"): "disputable counts per (epoch, host, rule)",
    ("alerts/downtime_by_disputable.sql", "view api.restitution_steps restitution_steps"): "as in the view",
    ("alerts/sprt_within_reach.sql", "view api.restitution_steps restitution_steps"): "as in the view",
    ("alerts/downtime_by_disputable.sql", "CTE settled_late sl"): "as in the view",
    ("alerts/sprt_within_reach.sql", "CTE settled_late sl"): "as in the view",
}


def test_intermediate_results_are_the_known_small_ones():
    cat = catalog()
    seen = set()
    for file, statement in rule_statements():
        for stmt in cc.statements_of(statement):
            seen |= {(f"rules/{file}", label) for label, _ in cc.check_statement(cat, file, stmt).intermediates}
    for folder in ("views", "alerts"):
        for path in sorted((SQL_DIR / folder).glob("*.sql")):
            for stmt in cc.statements_of(path.read_text()):
                seen |= {(f"{folder}/{path.name}", label)
                         for label, _ in cc.check_statement(cat, path.name, stmt).intermediates}
    assert seen == set(INTERMEDIATES)


def test_a_union_without_the_distribution_column_is_computed_first():
    stmt = cc.statements_of("SELECT * FROM (SELECT inference_id FROM rec.start_tx UNION ALL "
                            "SELECT inference_id FROM rec.finish_tx) u JOIN rec.escrow e ON true")[0]
    analyzer = cc.check_statement(catalog(), "test", stmt)
    assert analyzer.findings == []
    assert [label for label, _ in analyzer.intermediates] == ["the left branch of a set operation",
                                                             "the right branch of a set operation"]


# ---- the checker can fail ----------------------------------------------------------------------------------------

FLAGGED = {
    "explicit join": "SELECT * FROM rec.start_tx s JOIN rec.finish_tx f ON f.inference_id = s.inference_id",
    "comma join": "SELECT * FROM rec.start_tx s, rec.finish_tx f WHERE f.inference_id = s.inference_id",
    "equality under OR": "SELECT * FROM rec.start_tx s JOIN rec.finish_tx f "
                         "ON f.escrow_id = s.escrow_id OR f.inference_id = s.inference_id",
    "equality with another column": "SELECT * FROM rec.escrow e JOIN replay.inference i ON i.executor_address = "
                                    "e.escrow_id",
    "exists": "SELECT * FROM replay.inference i WHERE EXISTS "
              "(SELECT 1 FROM rules.disputable d WHERE d.inference_id = i.inference_id)",
    "in subquery correlated": "SELECT * FROM replay.inference i WHERE i.inference_id IN "
                              "(SELECT d.inference_id FROM rules.disputable d WHERE d.epoch_index = i.epoch_index)",
    "scalar subquery": "SELECT (SELECT count(*) FROM replay.vote v WHERE v.inference_id = i.inference_id) "
                       "FROM replay.inference i",
    "lateral": "SELECT * FROM rules.escrow_limit el CROSS JOIN LATERAL "
               "(SELECT * FROM rec.finish_tx WHERE epoch_index = el.epoch_index) f",
    "cte reference": "WITH x AS (SELECT escrow_id AS e, inference_id FROM rec.finish_tx) "
                     "SELECT * FROM x JOIN rec.start_tx s ON s.inference_id = x.inference_id",
    "subquery keeping rows": "SELECT * FROM (SELECT epoch_index, inference_id FROM replay.inference) i "
                             "JOIN rules.disputable d ON d.epoch_index = i.epoch_index",
    "function argument": "SELECT * FROM rec.start_tx s CROSS JOIN LATERAL "
                         "fn.sibling_finishes(s.prompt_hash, s.prompt_hash, s.inference_id) sib",
    "correlated from a reference table": "SELECT (SELECT count(*) FROM rec.escrow e "
                                         "WHERE e.epoch_index = p.epoch_index) FROM rec.epoch_params p",
    "merge": "MERGE INTO rules.disputable t USING rules.context_refusal s ON t.inference_id = s.inference_id "
             "WHEN MATCHED THEN DELETE",
    "delete using": "DELETE FROM rules.challenge c USING replay.inference i WHERE i.inference_id = c.inference_id",
    "view": "SELECT * FROM api.inferences a JOIN api.challenges c ON c.inference_id = a.inference_id",
    "different co-location group": "SELECT * FROM rec.escrow e JOIN net.raw_response r ON r.id::text = e.escrow_id",
    # 10_limits' model_limit statement before this branch: a per-key probe of every escrow of an epoch
    "model_limit as it was": """
        SELECT k.epoch_index, esc.escrow_limit
        FROM (SELECT epoch_index, model_id FROM rec.model_snapshot WHERE epoch_index = ANY(%(epochs)s)
              UNION SELECT epoch_index, model_id FROM rec.escrow WHERE epoch_index = ANY(%(epochs)s)) k
        LEFT JOIN LATERAL (SELECT mode() WITHIN GROUP (ORDER BY e.max_model_len) AS escrow_limit FROM rec.escrow e
                           WHERE e.epoch_index = k.epoch_index AND e.model_id = k.model_id) esc ON true""",
}

CLEAN = {
    "explicit join": "SELECT * FROM rec.start_tx s JOIN rec.finish_tx f "
                     "ON f.escrow_id = s.escrow_id AND f.inference_id = s.inference_id",
    "comma join": "SELECT * FROM rec.start_tx s, rec.finish_tx f "
                  "WHERE f.inference_id = s.inference_id AND f.escrow_id = s.escrow_id",
    "using": "SELECT * FROM rec.start_tx JOIN rec.finish_tx USING (escrow_id, inference_id)",
    "transitive": "SELECT * FROM rec.start_tx s JOIN rec.finish_tx f ON f.escrow_id = s.escrow_id "
                  "JOIN replay.inference i ON i.escrow_id = f.escrow_id",
    "exists": "SELECT * FROM replay.inference i WHERE EXISTS (SELECT 1 FROM rules.disputable d "
              "WHERE d.escrow_id = i.escrow_id AND d.inference_id = i.inference_id)",
    "lateral": "SELECT * FROM rules.escrow_limit el CROSS JOIN LATERAL "
               "(SELECT * FROM rec.finish_tx WHERE escrow_id = el.escrow_id OFFSET 0) f",
    "renamed cte column": "WITH x AS (SELECT escrow_id AS e, inference_id FROM rec.finish_tx) "
                          "SELECT * FROM x JOIN rec.start_tx s ON s.escrow_id = x.e",
    "grouped by escrow": "SELECT * FROM (SELECT escrow_id, count(*) AS n FROM replay.vote GROUP BY escrow_id) v "
                         "JOIN replay.escrow r ON r.escrow_id = v.escrow_id",
    "epoch aggregate": "WITH per_epoch AS (SELECT epoch_index, count(*) AS n FROM replay.inference "
                       "GROUP BY epoch_index) SELECT * FROM per_epoch p JOIN rec.escrow e "
                       "ON e.epoch_index = p.epoch_index",
    "union all aligned": "SELECT * FROM (SELECT escrow_id, inference_id FROM rec.start_tx UNION ALL "
                         "SELECT escrow_id, inference_id FROM rec.finish_tx) u JOIN rec.escrow e "
                         "ON e.escrow_id = u.escrow_id",
    "function argument": "SELECT * FROM rec.start_tx s CROSS JOIN LATERAL "
                         "fn.sibling_finishes(s.escrow_id, s.prompt_hash, s.inference_id) sib",
    "reference tables": "SELECT * FROM rec.escrow e JOIN rules.model_limit m ON m.epoch_index = e.epoch_index "
                        "JOIN rules.suspect sp ON sp.epoch_index = m.epoch_index",
    "view": "SELECT * FROM api.inferences a JOIN api.challenges c "
            "ON c.escrow_id = a.escrow_id AND c.inference_id = a.inference_id",
}


@pytest.mark.parametrize("case", sorted(FLAGGED))
def test_a_join_without_the_distribution_column_is_flagged(case):
    assert findings(FLAGGED[case], view_catalog()) != []


@pytest.mark.parametrize("case", sorted(CLEAN))
def test_a_join_on_the_distribution_column_passes(case):
    assert findings(CLEAN[case], view_catalog()) == []


# The real statements with one escrow_id equality taken out: each is then flagged (the checker reads these files).
MUTATIONS = [
    ("rules", "20_context_refusals.sql", "LEFT JOIN rec.start_tx s ON s.escrow_id = f.escrow_id AND",
     "LEFT JOIN rec.start_tx s ON"),
    ("rules", "30_sibling_findings.sql", "ON sibling_record.escrow_id = j.escrow_id", "ON true"),
    ("rules", "40_suspects.sql", "JOIN rec.escrow e ON e.escrow_id = el.escrow_id", "JOIN rec.escrow e ON true"),
    ("rules", "50_challenges.sql", "ON v.escrow_id = ch.escrow_id AND", "ON"),
    ("rules", "60_disputable.sql", "ON existing.escrow_id = latest.escrow_id AND", "ON"),
    ("views", "10_inferences.sql", "ON s.escrow_id = i.escrow_id AND", "ON"),
    ("views", "60_restitution.sql", "ON x.escrow_id = h.escrow_id AND", "ON"),
]


@pytest.mark.parametrize("folder,name,old,new", MUTATIONS, ids=[m[1] for m in MUTATIONS])
def test_removing_an_escrow_equality_from_a_real_statement_is_flagged(folder, name, old, new):
    text = (SQL_DIR / folder / name).read_text()
    assert text.count(old) == 1
    if folder == "rules":
        statements = [s for file, s in rule_statements() if file == name]
        mutated = [s.replace(old, new) for s in statements]
        assert mutated != statements
        assert [f for s in statements for f in cc.check_sql(catalog(), name, s)] == []
        assert [f for s in mutated for f in cc.check_sql(catalog(), name, s)] != []
    else:
        assert cc.check_sql(catalog(), name, text) == []
        assert cc.check_sql(catalog(), name, text.replace(old, new)) != []

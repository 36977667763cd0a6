-- Citus, step 0 (docs/scale.md "The road to Citus"): the extension in this database, on the coordinator and on every worker, as a
-- superuser. Run after `indexer migrate` has created every table, before 10_ .. 30_. Not applied by `indexer migrate`
-- (indexer.db.schema globs only sql/functions and sql/views): switching is an operator's decision.
--
-- The node topology is the cluster's, not the indexer's, so it is not scripted here; on the coordinator, once:
--   SELECT citus_set_coordinator_host('<coordinator host>', 5432);   -- needed for 30_local.sql
--   SELECT citus_add_node('<worker host>', 5432);                     -- once per worker
CREATE EXTENSION IF NOT EXISTS citus;

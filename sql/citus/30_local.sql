-- Citus, step 3: tables that stay on the coordinator, added to Citus's metadata so that queries may still join
-- them with reference and distributed tables (Citus plans the join around the local table). For tables whose
-- correctness rests on plain PostgreSQL row locks or on one writer, and that are small:
--  * work queues: claimed with DELETE ... FOR UPDATE SKIP LOCKED (indexer.db.claims). On a single node that is
--    exact; spread over shards a multi-shard FOR UPDATE is not supported, and on a reference table every claim
--    would lock a row on every node. On the coordinator they keep their semantics: every indexer process connects
--    to the coordinator, so two workers still never claim the same key.
--  * the poller's cursors, progress and failures (written every cycle, one row per source: a reference table
--    would turn each into a write on every node), the rules' run log and the amendment history (append-only, read
--    by operators).
--  * alert state, silences, outbox and deliveries: one alert job under an advisory lock writes them, deliveries are
--    leased with FOR UPDATE SKIP LOCKED; they are never joined with the escrow facts.
-- Requires the coordinator in the metadata (citus_set_coordinator_host, 00_extension.sql).

-- work queues (dirty marks) and the rules' run log
SELECT citus_add_local_table_to_metadata('replay.dirty_escrow');
SELECT citus_add_local_table_to_metadata('rules.dirty_escrow');
SELECT citus_add_local_table_to_metadata('rules.dirty_epoch');
SELECT citus_add_local_table_to_metadata('rules.run');
SELECT citus_add_local_table_to_metadata('rec.amendment');

-- the poller's control state
SELECT citus_add_local_table_to_metadata('net.cursor');
SELECT citus_add_local_table_to_metadata('net.failure');
SELECT citus_add_local_table_to_metadata('net.failure_pruned');
SELECT citus_add_local_table_to_metadata('net.epoch_state');
SELECT citus_add_local_table_to_metadata('net.progress');
SELECT citus_add_local_table_to_metadata('net.snapshot_failure');
-- 0/0 Finishes awaiting their payload: claimed with FOR UPDATE SKIP LOCKED (indexer.poller.awaited)
SELECT citus_add_local_table_to_metadata('net.awaited_payload');
-- which settled epochs' partitions were frozen (by relation oid: the coordinator's own catalog)
SELECT citus_add_local_table_to_metadata('net.frozen_partition');
-- the pollers' work leases: taken with INSERT ... ON CONFLICT ... WHERE expired, a single-row atomic step that
-- needs one node's row lock
SELECT citus_add_local_table_to_metadata('net.lease');

-- alerts: state <- notification <- delivery <- delivery_attempt are tied by foreign keys and move together
SELECT citus_add_local_table_to_metadata('alert.state', cascade_via_foreign_keys => true);
SELECT citus_add_local_table_to_metadata('alert.silence');

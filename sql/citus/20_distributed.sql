-- Citus, step 2: the escrow facts, hash-distributed by escrow_id and co-located: every shard of every table below
-- holds the same escrows, so a join on escrow_id runs on one node without moving rows. The escrow is the natural
-- unit: a devshard log is signed per escrow, replayed per escrow, and every rule joins within one escrow
-- (tests/db/test_citus_static.py checks that every join between these tables equates escrow_id).
-- rec.escrow anchors the co-location group; the shard count is fixed at creation (citus.shard_count, default 32:
-- enough for 32 workers; choose it before the first call, changing it later means alter_distributed_table).
-- The one list: the static test reads these calls (no other file names the distributed tables).
SELECT create_distributed_table('rec.escrow', 'escrow_id');

-- signed transactions of each escrow's log
SELECT create_distributed_table('rec.start_tx', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rec.confirm_start_tx', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rec.finish_tx', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rec.validation_tx', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rec.validation_vote_tx', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rec.timeout_tx', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rec.error_miss_tx', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rec.host_stats', 'escrow_id', colocate_with => 'rec.escrow');
-- what verification reads: each diff as served, and the settlement transaction
SELECT create_distributed_table('rec.signed_diff', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rec.settlement', 'escrow_id', colocate_with => 'rec.escrow');
-- the partition (epoch) each escrow's rows above are routed to (0014_partitioned_history); Citus distributes a
-- partitioned table's partitions with it, so the epoch partitions need no placement of their own
SELECT create_distributed_table('rec.escrow_epoch', 'escrow_id', colocate_with => 'rec.escrow');

-- the replay's results, per escrow
SELECT create_distributed_table('replay.escrow', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('replay.inference', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('replay.rejected_tx', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('replay.vote', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('replay.slot_stats', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('replay.escrow_verification', 'escrow_id', colocate_with => 'rec.escrow');

-- the rules' per-inference and per-escrow findings
SELECT create_distributed_table('rules.refusal_parse', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rules.escrow_limit', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rules.context_refusal', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rules.sibling_finding', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rules.challenge', 'escrow_id', colocate_with => 'rec.escrow');
SELECT create_distributed_table('rules.disputable', 'escrow_id', colocate_with => 'rec.escrow');

-- the poller's archive of every HTTP response: the largest table by bytes, only ever appended (COPY) and read back
-- by id or time for re-derivation, never joined. Spread by its own key in a group of its own, for disk, not joins.
SELECT create_distributed_table('net.raw_response', 'id', colocate_with => 'none');

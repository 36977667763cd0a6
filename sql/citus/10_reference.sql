-- Citus, step 1: reference tables, a full copy on every node, so any distributed table joins them locally on any
-- column. For tables that are small beside the escrow facts (a row per epoch, per model and epoch, per host and
-- epoch, per input file) and that are read across escrows. Writes go to every node in one transaction: fine at
-- their rate (an epoch snapshot, a rules claim, a loaded file).
-- The one list: tests/db/test_citus_static.py reads these calls (no other file names the reference tables).

-- provenance: one row per input file; quarantined lines reference it (a reference -> reference foreign key)
SELECT create_reference_table('rec.source');
SELECT create_reference_table('rec.quarantine');

-- epoch dimension: the epoch, its model args, its parameters
SELECT create_reference_table('rec.epoch');
SELECT create_reference_table('rec.model_snapshot');
SELECT create_reference_table('rec.epoch_params');

-- keyed by (epoch, participant), not by escrow: a row per host and epoch (thousands per epoch, not millions). They
-- are read beside per-host aggregates of the escrow facts (api.host_epoch_penalties, api.restitution_outcomes),
-- which are grouped by epoch and participant, so a copy on every node is what those joins need.
SELECT create_reference_table('rec.host_epoch_stats');
SELECT create_reference_table('rec.participant_epoch');
SELECT create_reference_table('rec.warm_key');

-- governance limits per (epoch, model): read by every escrow of the epoch
SELECT create_reference_table('rules.model_limit');

-- raised-limit suspects: found per escrow but used across escrows (a suspect found in escrow A discounts its votes
-- in every escrow B of the epoch: sql/rules/50_challenges.sql joins it on participant), so every node needs all of
-- them. Rows are evidence of misbehaviour, bounded by hosts x models x findings; it has no key (a voter can be named
-- twice for one inference), hence REPLICA IDENTITY FULL in migration 0012_citus_ready for online node changes.
SELECT create_reference_table('rules.suspect');

-- chain versions: a row per upgrade and per analyst override, read by fn.chain_version_at on any node
SELECT create_reference_table('chain.upgrade');
SELECT create_reference_table('chain.version_override');

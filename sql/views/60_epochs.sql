-- api.epochs: one row per epoch the indexer knows of (from the chain, ingested records or the poller's finality
-- state), with the parameters in force for it: the root epoch group's validation_params (the epoch's own snapshot;
-- governance may change live params afterwards) as published and its main decimals computed exactly
-- (fn.chain_decimal). params_exact = false: /params could not be read as of the epoch (pruned height, or the epoch
-- was still running) and live values stood in (params_height says where they were read).
-- state: open, settling, final, or pruned / missed (final because it left the pruning window unfinished, or before
-- the poller saw it); null for epochs only ingested from files. snapshot_failures: chain reads of the epoch that
-- failed and have not succeeded since (net.snapshot_failure; api.ingest_status names each).
CREATE VIEW api.epochs AS
SELECT k.epoch_index, e.start_height, e.end_height,
       CASE WHEN s.state = 'final' AND s.reason IN ('pruned', 'missed') THEN s.reason ELSE s.state END AS state,
       fn.chain_decimal(p.validation_params -> 'binom_test_p0') AS binom_test_p0,
       fn.chain_decimal(p.validation_params -> 'false_positive_rate') AS false_positive_rate,
       fn.chain_decimal(p.validation_params -> 'bad_participant_invalidation_rate')
           AS bad_participant_invalidation_rate,
       fn.chain_decimal(p.validation_params -> 'invalidation_h_threshold') AS invalidation_h_threshold,
       p.validation_params, p.params_exact, p.params_height, p.total_weight, p.bitcoin_reward_params,
       p.devshard_escrow_params, s.reason AS state_reason,
       -- the chain version in force (fn.chain_version_at: analyst override, else the upgrade heights in
       -- chain.upgrade, which the poller fills from the chain's applied upgrade plans, else the newest assumed)
       v.chain_version, v.version_source AS chain_version_source, v.lower_bound AS chain_version_lower_bound,
       (SELECT count(*) FROM net.snapshot_failure f WHERE f.epoch_index = k.epoch_index) AS snapshot_failures
FROM (SELECT epoch_index FROM rec.epoch
      UNION SELECT epoch_index FROM rec.epoch_params
      UNION SELECT epoch_index FROM net.epoch_state) k
LEFT JOIN rec.epoch e ON e.epoch_index = k.epoch_index
LEFT JOIN rec.epoch_params p ON p.epoch_index = k.epoch_index
LEFT JOIN net.epoch_state s ON s.epoch_index = k.epoch_index
CROSS JOIN LATERAL fn.chain_version_at(k.epoch_index) v;

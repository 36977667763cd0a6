-- Governance limit per (epoch, model) and per escrow. The escrow's own max_model_len (#1763) wins when present
-- and non-zero (0 = unknown/uncapped); else the epoch snapshot's model_args. Never the error text.
-- Per-escrow findings (this file's escrow_limit, 20, 30) are recomputed for %(escrows)s: the escrows that changed
-- since their last evaluation, or every escrow of an epoch whose epoch-level inputs changed (indexer.rules.run).
DELETE FROM rules.escrow_limit WHERE escrow_id = ANY(%(escrows)s);

INSERT INTO rules.escrow_limit (escrow_id, epoch_index, model_id, governance_limit, limit_source,
                                max_input_tokens, max_served_tokens)
WITH args AS MATERIALIZED (  -- parse each (epoch, model)'s args once, not once per escrow (MATERIALIZED: inlined, the
                            -- planner may call the parser per escrow when the Finish probes look dear)
  SELECT m.epoch_index, m.model_id, a.args_limit
  FROM rec.model_snapshot m CROSS JOIN LATERAL fn.max_model_len(m.model_args) a
  WHERE m.epoch_index IN (SELECT epoch_index FROM rec.escrow WHERE escrow_id = ANY(%(escrows)s))
)
SELECT e.escrow_id, e.epoch_index, e.model_id,
       COALESCE(NULLIF(e.max_model_len, 0), a.args_limit),
       CASE WHEN NULLIF(e.max_model_len, 0) IS NOT NULL THEN 'escrow'
            WHEN a.args_limit IS NOT NULL THEN 'model_args' END,
       t.max_input, t.max_served
FROM rec.escrow e
LEFT JOIN args a ON a.epoch_index = e.epoch_index AND a.model_id = e.model_id
CROSS JOIN LATERAL (  -- the one walk over the epoch's Finishes: bounds for the suspect and timeout rules
  -- served in numeric (two counts up to 2^63 - 1 each), kept at most 2^63 - 1: only compared with limits, which are
  -- bigints, and 40_suspects compares each Finish's exact sum
  SELECT max(input_tokens) AS max_input,
         least(max(input_tokens::numeric + output_tokens), 9223372036854775807)::bigint AS max_served
  FROM rec.finish_tx WHERE escrow_id = e.escrow_id AND epoch_index = e.epoch_index
    AND epoch_index = ANY(%(parts)s)) t  -- its epoch's partition, pruned at plan time (indexer.rules.run)
WHERE e.escrow_id = ANY(%(escrows)s) AND e.epoch_index IS NOT NULL;

DELETE FROM rules.model_limit WHERE epoch_index = ANY(%(epochs)s);

INSERT INTO rules.model_limit (epoch_index, model_id, governance_limit, limit_source, model_args, args_limit,
                               escrow_limit, flag_occurrences, mixed_forms, loophole_risk, rule_version)
SELECT k.epoch_index, k.model_id,
       COALESCE(esc.escrow_limit, a.args_limit),
       CASE WHEN esc.escrow_limit IS NOT NULL THEN 'escrow' WHEN a.args_limit IS NOT NULL THEN 'model_args' END,
       m.model_args, a.args_limit, esc.escrow_limit, COALESCE(a.occurrences, 0), COALESCE(a.mixed_forms, false),
       COALESCE(a.occurrences > 1 OR a.mixed_forms, false), %(version)s
FROM (SELECT epoch_index, model_id FROM rec.model_snapshot WHERE epoch_index = ANY(%(epochs)s)
      UNION SELECT epoch_index, model_id FROM rec.escrow
            WHERE epoch_index = ANY(%(epochs)s) AND model_id IS NOT NULL) k
LEFT JOIN rec.model_snapshot m USING (epoch_index, model_id)
LEFT JOIN LATERAL fn.max_model_len(m.model_args) a ON true
-- the escrows' own limits, grouped once per (epoch, model) and joined, not probed per key from k: a correlated
-- subquery over escrows from an epoch-level key would need a join on escrow_id to be pushed down on Citus
LEFT JOIN (SELECT e.epoch_index, e.model_id, mode() WITHIN GROUP (ORDER BY e.max_model_len) AS escrow_limit
           FROM rec.escrow e
           WHERE e.epoch_index = ANY(%(epochs)s) AND e.max_model_len > 0
           GROUP BY e.epoch_index, e.model_id) esc
       ON esc.epoch_index = k.epoch_index AND esc.model_id = k.model_id;

-- Hosts with behavioural evidence of a local limit above governance (#1911 loophole): they served more tokens
-- than the governance limit allows, stated a higher limit in their own refusal, or voted invalid on a refusal
-- shown over the limit. Each is judged against the limit of its record's own model (fn.record_limit), and a row
-- names that model. Every row is one escrow's evidence, so an epoch re-evaluated for a few changed escrows
-- (%(scoped)s: indexer.rules.run) rewrites only their rows; a whole epoch rewrites all of them.
DELETE FROM rules.suspect
WHERE epoch_index = ANY(%(epochs)s) AND (NOT %(scoped)s OR escrow_id = ANY(%(escrows)s));

INSERT INTO rules.suspect (epoch_index, participant, model_id, evidence_kind, observed_tokens, governance_limit,
                           escrow_id, inference_id, rule_version)
SELECT el.epoch_index, e.slots[f.executor_slot + 1], f.model_id, 'served_above_limit',
       fn.bigint_or_null(f.served),  -- past bigint: unknown, not capped
       f.governance_limit, el.escrow_id, f.inference_id, %(version)s
FROM rules.escrow_limit el
JOIN rec.escrow e ON e.escrow_id = el.escrow_id
CROSS JOIN LATERAL (  -- per escrow: each Finish above the limit of its record's own model (its Start's)
  SELECT f.inference_id, f.executor_slot, f.diff_nonce, f.input_tokens::numeric + f.output_tokens AS served,
         lim.model_id, lim.governance_limit
  FROM rec.finish_tx f
  LEFT JOIN rec.start_tx s ON s.escrow_id = f.escrow_id AND s.inference_id = f.inference_id
                          AND s.epoch_index = el.epoch_index AND s.epoch_index = ANY(%(parts)s)
  CROSS JOIN LATERAL fn.record_limit(el.model_id, el.governance_limit, el.limit_source, el.epoch_index, s.model) lim
  WHERE f.escrow_id = el.escrow_id AND f.epoch_index = el.epoch_index AND f.epoch_index = ANY(%(parts)s)
    AND f.input_tokens::numeric + f.output_tokens > lim.governance_limit) f
-- only a Finish the escrow applied: one the state machine rejected (say, naming a slot that is not the executor's)
-- shows nothing about the host its slot names
JOIN replay.inference applied ON applied.escrow_id = el.escrow_id AND applied.inference_id = f.inference_id
                             AND applied.epoch_index = el.epoch_index AND applied.epoch_index = ANY(%(parts)s)
                             AND applied.finished_nonce = f.diff_nonce
WHERE el.epoch_index = ANY(%(epochs)s)
  -- only escrows whose largest Finish (10_limits) served above the escrow's limit, or that hold a Start of another
  -- model (judged against that model's limit, which the escrow's bound says nothing about); >=: capped at 2^63 - 1
  AND (el.max_served_tokens >= el.governance_limit
       OR EXISTS (SELECT FROM rec.start_tx other
                  WHERE other.escrow_id = el.escrow_id AND other.epoch_index = el.epoch_index
                    AND other.epoch_index = ANY(%(parts)s)
                    AND NULLIF(other.model, '') IS NOT NULL AND other.model IS DISTINCT FROM el.model_id))
  AND (NOT %(scoped)s OR el.escrow_id = ANY(%(escrows)s))
  AND f.executor_slot < cardinality(e.slots)
UNION ALL
SELECT cr.epoch_index, cr.executor_address, cr.model_id, 'stated_limit_above', cr.reported_limit,
       cr.governance_limit, cr.escrow_id, cr.inference_id, %(version)s
FROM rules.context_refusal cr
WHERE cr.epoch_index = ANY(%(epochs)s) AND cr.reported_limit > cr.governance_limit AND cr.executor_address IS NOT NULL
  AND (NOT %(scoped)s OR cr.escrow_id = ANY(%(escrows)s))
UNION ALL
SELECT cr.epoch_index, e.slots[v.slot + 1], cr.model_id, 'voted_invalid_on_over_limit', cr.prompt_tokens,
       cr.governance_limit, cr.escrow_id, cr.inference_id, %(version)s
FROM rules.context_refusal cr
JOIN rec.escrow e ON e.escrow_id = cr.escrow_id
CROSS JOIN LATERAL (
  SELECT validator_slot AS slot FROM rec.validation_tx
  WHERE escrow_id = cr.escrow_id AND inference_id = cr.inference_id AND epoch_index = cr.epoch_index
    AND epoch_index = ANY(%(parts)s) AND NOT valid
  UNION ALL
  SELECT voter_slot FROM rec.validation_vote_tx
  WHERE escrow_id = cr.escrow_id AND inference_id = cr.inference_id AND epoch_index = cr.epoch_index
    AND epoch_index = ANY(%(parts)s) AND NOT vote_valid) v
WHERE cr.epoch_index = ANY(%(epochs)s) AND cr.verdict = 'over_limit' AND v.slot < cardinality(e.slots)
  AND (NOT %(scoped)s OR cr.escrow_id = ANY(%(escrows)s));

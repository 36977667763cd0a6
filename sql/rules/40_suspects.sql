-- Hosts with behavioural evidence of a local limit above governance (#1911 loophole): they served more tokens
-- than the governance limit allows, stated a higher limit in their own refusal, or voted invalid on a refusal
-- shown over the limit. Every row is one escrow's evidence, so an epoch re-evaluated for a few changed escrows
-- (%(scoped)s: indexer.rules.run) rewrites only their rows; a whole epoch rewrites all of them.
DELETE FROM rules.suspect
WHERE epoch_index = ANY(%(epochs)s) AND (NOT %(scoped)s OR escrow_id = ANY(%(escrows)s));

INSERT INTO rules.suspect (epoch_index, participant, model_id, evidence_kind, observed_tokens, governance_limit,
                           escrow_id, inference_id, rule_version)
SELECT el.epoch_index, e.slots[f.executor_slot + 1], el.model_id, 'served_above_limit',
       fn.bigint_or_null(f.served),  -- past bigint: unknown, not capped
       el.governance_limit, el.escrow_id, f.inference_id, %(version)s
FROM rules.escrow_limit el
JOIN rec.escrow e ON e.escrow_id = el.escrow_id
CROSS JOIN LATERAL (  -- per escrow, and only escrows whose largest Finish (10_limits) served above the limit
  SELECT inference_id, executor_slot, diff_nonce, input_tokens::numeric + output_tokens AS served FROM rec.finish_tx
  WHERE escrow_id = el.escrow_id AND epoch_index = el.epoch_index AND epoch_index = ANY(%(parts)s)
    AND input_tokens::numeric + output_tokens > el.governance_limit) f
-- only a Finish the escrow applied: one the state machine rejected (say, naming a slot that is not the executor's)
-- shows nothing about the host its slot names
JOIN replay.inference applied ON applied.escrow_id = el.escrow_id AND applied.inference_id = f.inference_id
                             AND applied.epoch_index = el.epoch_index AND applied.epoch_index = ANY(%(parts)s)
                             AND applied.finished_nonce = f.diff_nonce
WHERE el.epoch_index = ANY(%(epochs)s) AND el.max_served_tokens >= el.governance_limit  -- >=: capped at 2^63 - 1
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

-- Penalties the rules would not uphold, one row per penalty, in three families:
--   invalidated_context_refusal  an Invalidated 0/0 context-length (or unknown-payload) refusal not shown to fit
--   error_miss_sibling           an error-miss on an unbilled client fault that only today's sibling rule admits
--                                (or that not even today's rule admits)
--   timeout_over_limit           a refused/execution timeout on a request shown over the limit by signed tokens
-- detected_at survives re-evaluation: one MERGE keyed like the table updates a finding only when it changed, so it
-- keeps the time it was first seen, and deletes the epochs' findings no longer found.
MERGE INTO rules.disputable d
USING (
WITH over AS MATERIALIZED (  -- refused/execution timeouts shown over the limit, found from the compact timeout txs
                            -- so that only these read their replayed record
  SELECT t.escrow_id, t.inference_id, s.max_tokens, s.input_length, el.governance_limit, el.limit_source,
         sib.inference_id AS sibling_id, sib.input_tokens AS sibling_input
  FROM rules.escrow_limit el
  CROSS JOIN LATERAL (  -- per escrow (OFFSET 0: not a hash join over every epoch's timeouts)
    SELECT escrow_id, inference_id FROM rec.timeout_tx
    WHERE escrow_id = el.escrow_id AND reason IN ('refused', 'execution') OFFSET 0) t
  JOIN rec.start_tx s ON s.escrow_id = t.escrow_id AND s.inference_id = t.inference_id
  LEFT JOIN LATERAL (
    SELECT sf.inference_id, sf.input_tokens
    FROM rec.start_tx s2
    JOIN rec.finish_tx sf ON sf.escrow_id = s2.escrow_id AND sf.inference_id = s2.inference_id
                         AND sf.input_tokens > 0
    WHERE s2.escrow_id = s.escrow_id AND s2.prompt_hash = s.prompt_hash AND s.prompt_hash <> ''
      AND s2.inference_id <> s.inference_id
      -- no probe when even the escrow's largest input (10_limits) could not show it over the limit
      AND fn.shown_over_limit(el.max_input_tokens, s.max_tokens, el.governance_limit)
    ORDER BY sf.input_tokens DESC, sf.inference_id LIMIT 1) sib ON true
  WHERE el.epoch_index = ANY(%(epochs)s)
    AND fn.shown_over_limit(sib.input_tokens, s.max_tokens, el.governance_limit)
), found AS (
  SELECT cr.epoch_index, cr.escrow_id, cr.inference_id, cr.executor_address AS participant, cr.executor_slot,
         'invalid' AS penalty, 'invalidated_context_refusal' AS rule, cr.verdict,
         cr.evidence || jsonb_strip_nulls(jsonb_build_object(
           'refusal_kind', cr.refusal_kind, 'prompt_tokens', cr.prompt_tokens,
           'prompt_tokens_source', cr.prompt_tokens_source, 'prompt_is_lower_bound', cr.prompt_is_lower_bound,
           'challenge', jsonb_build_object('votes_valid', i.votes_valid, 'votes_invalid', i.votes_invalid,
                                           'vote_threshold', i.vote_threshold,
                                           'suspect_invalid_weight', c.suspect_invalid_weight,
                                           'suspect_voters', to_jsonb(c.suspect_voters),
                                           'outcome_without_suspects', c.outcome_without_suspects))) AS evidence
  FROM rules.context_refusal cr
  JOIN replay.inference i ON i.escrow_id = cr.escrow_id AND i.inference_id = cr.inference_id
  LEFT JOIN rules.challenge c ON c.escrow_id = cr.escrow_id AND c.inference_id = cr.inference_id
  WHERE cr.epoch_index = ANY(%(epochs)s) AND cr.penalty = 'invalid' AND i.penalty = 'invalid'  -- cr: copied by 20
    AND cr.refusal_kind IN ('context_length', 'unknown') AND cr.verdict <> 'fits'
  UNION ALL
  SELECT sf.epoch_index, sf.escrow_id, sf.inference_id, i.executor_address, i.executor_slot, 'missed',
         'error_miss_sibling', COALESCE(cr.verdict, 'undetermined'),
         jsonb_strip_nulls(jsonb_build_object(
           'error_miss_nonce', sf.error_miss_nonce, 'client_fault_basis', sf.client_fault_basis,
           'sibling_inference_id', sf.sibling_inference_id, 'sibling_input_tokens', sf.sibling_input_tokens,
           'sibling_output_tokens', sf.sibling_output_tokens, 'sibling_status', sf.sibling_status,
           'max_tokens', sf.max_tokens, 'governance_limit', sf.governance_limit,
           'accepted_current_rule', sf.accepted_current_rule, 'accepted_hardened_rule', sf.accepted_hardened_rule,
           'refusal_kind', cr.refusal_kind))
  FROM rules.sibling_finding sf
  JOIN replay.inference i ON i.escrow_id = sf.escrow_id AND i.inference_id = sf.inference_id
  LEFT JOIN rules.context_refusal cr ON cr.escrow_id = sf.escrow_id AND cr.inference_id = sf.inference_id
  WHERE sf.epoch_index = ANY(%(epochs)s) AND sf.applied AND sf.client_fault_basis IS NOT NULL
    AND (sf.accepted_current_rule = false OR sf.accepted_hardened_rule = false)
  UNION ALL
  SELECT i.epoch_index, i.escrow_id, i.inference_id, i.executor_address, i.executor_slot, 'missed',
         'timeout_over_limit', 'over_limit',
         jsonb_strip_nulls(jsonb_build_object(
           'timeout_reason', i.timeout_reason, 'timeout_nonce', i.timed_out_nonce, 'max_tokens', o.max_tokens,
           'input_length', o.input_length, 'governance_limit', o.governance_limit,
           'limit_source', o.limit_source, 'sibling_inference_id', o.sibling_id,
           'sibling_input_tokens', o.sibling_input,
           'shown_by', CASE WHEN o.max_tokens > o.governance_limit THEN 'max_tokens' ELSE 'sibling' END))
  FROM over o
  JOIN replay.inference i ON i.escrow_id = o.escrow_id AND i.inference_id = o.inference_id
  WHERE i.epoch_index = ANY(%(epochs)s) AND i.status = 'TimedOut' AND i.timeout_reason IN ('refused', 'execution')
), old AS (
  SELECT escrow_id, inference_id, penalty FROM rules.disputable WHERE epoch_index = ANY(%(epochs)s)
)
SELECT * FROM found FULL JOIN old USING (escrow_id, inference_id, penalty)  -- rule IS NULL: no longer found
) f ON d.escrow_id = f.escrow_id AND d.inference_id = f.inference_id AND d.penalty = f.penalty
WHEN MATCHED AND f.rule IS NULL THEN DELETE
WHEN MATCHED AND (d.epoch_index, d.participant, d.executor_slot, d.rule, d.verdict, d.evidence, d.rule_version)
                 IS DISTINCT FROM (f.epoch_index, f.participant, f.executor_slot, f.rule, f.verdict, f.evidence,
                                   %(version)s) THEN
  UPDATE SET epoch_index = f.epoch_index, participant = f.participant, executor_slot = f.executor_slot,
             rule = f.rule, verdict = f.verdict, evidence = f.evidence, rule_version = %(version)s
WHEN NOT MATCHED THEN
  INSERT (epoch_index, escrow_id, inference_id, participant, executor_slot, penalty, rule, verdict, evidence,
          rule_version, detected_at)
  VALUES (f.epoch_index, f.escrow_id, f.inference_id, f.participant, f.executor_slot, f.penalty, f.rule, f.verdict,
          f.evidence, %(version)s, now());

-- Penalties the rules would not uphold, one row per penalty, in three families:
--   invalidated_context_refusal  an Invalidated 0/0 context-length (or unknown-payload) refusal not shown to fit
--   error_miss_sibling           an error-miss on an unbilled client fault that only today's sibling rule admits
--                                (or that not even today's rule admits), or whose refusal is not shown to fit
--                                (siblings' signed counts disagree, and the largest shows it over the limit)
--   timeout_over_limit           a refused/execution timeout on a request shown over the limit by signed tokens
-- detected_at survives re-evaluation: one MERGE keyed like the table updates a finding only when it changed, so it
-- keeps the time it was first seen, and deletes the epochs' findings no longer found. A finding depends on its
-- escrow's rows and its challenge row (50): with %(scoped)s only the changed escrows' findings are merged.
MERGE INTO rules.disputable existing
USING (
WITH timeout_over_limit AS MATERIALIZED (  -- refused/execution timeouts shown over the limit, found from the compact
                                          -- timeout txs so that only these read their replayed record
  SELECT t.escrow_id, t.inference_id, el.epoch_index, s.max_tokens, s.input_length, lim.governance_limit, lim.limit_source,
         sib.sibling_inference_id, sib.sibling_input_tokens
  FROM rules.escrow_limit el
  CROSS JOIN LATERAL (  -- per escrow (OFFSET 0: not a hash join over every epoch's timeouts)
    SELECT escrow_id, inference_id FROM rec.timeout_tx
    WHERE escrow_id = el.escrow_id AND epoch_index = el.epoch_index AND epoch_index = ANY(%(parts)s)
      AND reason IN ('refused', 'execution')
    OFFSET 0) t
  CROSS JOIN LATERAL (  -- each timeout's Start, probed (OFFSET 0: one epoch's partition is small enough that the
                        -- planner would hash all of it, which costs more than the few probes)
    SELECT escrow_id, inference_id, max_tokens, input_length, prompt_hash, model FROM rec.start_tx
    WHERE escrow_id = t.escrow_id AND inference_id = t.inference_id
      AND epoch_index = el.epoch_index AND epoch_index = ANY(%(parts)s)
    OFFSET 0) s
  -- the limit of the record's own model (its Start's), not necessarily the escrow's
  CROSS JOIN LATERAL fn.record_limit(el.model_id, el.governance_limit, el.limit_source, el.epoch_index, s.model) lim
  LEFT JOIN LATERAL (
    SELECT largest.sibling_inference_id, largest.sibling_input_tokens
    FROM fn.largest_sibling(s.escrow_id, s.prompt_hash, s.inference_id, %(parts)s::bigint[]) largest
    -- no probe when even the escrow's largest input (10_limits) could not show it over the limit (OFFSET 0 keeps
    -- this a gate in front of the probe, not a filter the join applies after it)
    WHERE fn.shown_over_limit(el.max_input_tokens, s.max_tokens, lim.governance_limit) OFFSET 0) sib ON true
  WHERE el.epoch_index = ANY(%(epochs)s) AND (NOT %(scoped)s OR el.escrow_id = ANY(%(escrows)s))
    AND fn.shown_over_limit(sib.sibling_input_tokens, s.max_tokens, lim.governance_limit)
), found AS (
  SELECT cr.epoch_index, cr.escrow_id, cr.inference_id, cr.executor_address AS participant, cr.executor_slot,
         'invalid' AS penalty, 'invalidated_context_refusal' AS rule, cr.verdict,
         cr.evidence || jsonb_strip_nulls(jsonb_build_object(
           'refusal_kind', cr.refusal_kind, 'prompt_tokens', cr.prompt_tokens,
           'prompt_tokens_source', cr.prompt_tokens_source, 'prompt_is_lower_bound', cr.prompt_is_lower_bound,
           'challenge', jsonb_build_object('votes_valid', i.votes_valid, 'votes_invalid', i.votes_invalid,
                                           'vote_threshold', i.vote_threshold,
                                           'suspect_invalid_weight', challenge.suspect_invalid_weight,
                                           'suspect_voters', to_jsonb(challenge.suspect_voters),
                                           'outcome_without_suspects',
                                           challenge.outcome_without_suspects))) AS evidence
  FROM rules.context_refusal cr
  JOIN replay.inference i ON i.escrow_id = cr.escrow_id AND i.inference_id = cr.inference_id
                         AND i.epoch_index = cr.epoch_index AND i.epoch_index = ANY(%(parts)s)
  -- the refusal's own epoch: rules.challenge is rebuilt per epoch, so an escrow moved to another epoch still has
  -- its old epoch's row until that epoch is evaluated again
  LEFT JOIN rules.challenge challenge ON challenge.escrow_id = cr.escrow_id
                                     AND challenge.inference_id = cr.inference_id
                                     AND challenge.epoch_index = cr.epoch_index
                                     AND challenge.epoch_index = ANY(%(parts)s)
  WHERE cr.epoch_index = ANY(%(epochs)s) AND cr.penalty = 'invalid' AND i.penalty = 'invalid'  -- cr: copied by 20
    -- 'unknown': a 0/0 Finish without payload (fn.is_client_fault_finish NULL). The decision: it counts as a
    -- context refusal, since a refusal counts against the host only when shown to fit (interface.md §3)
    AND cr.refusal_kind IN ('context_length', 'unknown') AND cr.verdict <> 'fits'
    AND (NOT %(scoped)s OR cr.escrow_id = ANY(%(escrows)s))
  UNION ALL
  SELECT sf.epoch_index, sf.escrow_id, sf.inference_id, i.executor_address, i.executor_slot, 'missed',
         'error_miss_sibling', COALESCE(cr.verdict, 'undetermined'),
         jsonb_strip_nulls(jsonb_build_object(
           'error_miss_nonce', sf.error_miss_nonce, 'client_fault_basis', sf.client_fault_basis,
           'sibling_inference_id', sf.sibling_inference_id, 'sibling_input_tokens', sf.sibling_input_tokens,
           'sibling_output_tokens', sf.sibling_output_tokens, 'sibling_status', sf.sibling_status,
           'max_tokens', sf.max_tokens, 'governance_limit', sf.governance_limit,
           'accepted_current_rule', sf.accepted_current_rule, 'accepted_hardened_rule', sf.accepted_hardened_rule,
           'refusal_kind', cr.refusal_kind,
           -- the count the refusal's verdict used (the largest signed sibling count, when one served)
           'refusal_prompt_tokens', cr.prompt_tokens, 'refusal_prompt_tokens_source', cr.prompt_tokens_source))
  FROM rules.sibling_finding sf
  JOIN replay.inference i ON i.escrow_id = sf.escrow_id AND i.inference_id = sf.inference_id
                         AND i.epoch_index = sf.epoch_index AND i.epoch_index = ANY(%(parts)s)
  LEFT JOIN rules.context_refusal cr ON cr.escrow_id = sf.escrow_id AND cr.inference_id = sf.inference_id
                                     AND cr.epoch_index = sf.epoch_index AND cr.epoch_index = ANY(%(parts)s)
  -- client_fault_basis: the Finish is a client fault, or a 0/0 one whose payload we lack. For the latter an
  -- acceptance is NULL (unknown) unless a sibling settles it (30); the decision here: the miss is disputable. The
  -- executor signs 0/0 only for a client fault (gonka-devshard.md §2.1), which verifiers reject without a
  -- qualifying sibling, and a payload we do not have cannot show the miss deserved: the same benefit of the doubt
  -- that the invalidated family above gives an 'unknown' refusal.
  WHERE sf.epoch_index = ANY(%(epochs)s) AND sf.applied AND sf.client_fault_basis IS NOT NULL
    -- The miss stands only when today's rule accepts it, the hardened rule does not reject it, and the refusal is
    -- shown to fit (cr: the largest signed count; a refusal counts only when it fits). So both rules accepting on a
    -- sibling whose count fits, while another signed count shows the request over, leaves it disputable; and a
    -- hardened acceptance that is unknown (a sibling that signed input_tokens 0) decides nothing when the refusal's
    -- own evidence shows it fits, and leaves it disputable otherwise (the verdict is then not 'fits').
    AND (sf.accepted_current_rule IS NOT TRUE OR sf.accepted_hardened_rule IS FALSE
         OR cr.verdict IS DISTINCT FROM 'fits')
    AND (NOT %(scoped)s OR sf.escrow_id = ANY(%(escrows)s))
  UNION ALL
  SELECT i.epoch_index, i.escrow_id, i.inference_id, i.executor_address, i.executor_slot, 'missed',
         'timeout_over_limit', 'over_limit',
         jsonb_strip_nulls(jsonb_build_object(
           'timeout_reason', i.timeout_reason, 'timeout_nonce', i.timed_out_nonce,
           'max_tokens', over_limit.max_tokens, 'input_length', over_limit.input_length,
           'governance_limit', over_limit.governance_limit, 'limit_source', over_limit.limit_source,
           'sibling_inference_id', over_limit.sibling_inference_id,
           'sibling_input_tokens', over_limit.sibling_input_tokens,
           'shown_by', CASE WHEN over_limit.max_tokens > over_limit.governance_limit THEN 'max_tokens'
                            ELSE 'sibling' END))
  FROM timeout_over_limit over_limit
  JOIN replay.inference i ON i.escrow_id = over_limit.escrow_id AND i.inference_id = over_limit.inference_id
                         AND i.epoch_index = over_limit.epoch_index AND i.epoch_index = ANY(%(parts)s)
  WHERE i.epoch_index = ANY(%(epochs)s) AND i.status = 'TimedOut' AND i.timeout_reason IN ('refused', 'execution')
), old AS (
  SELECT escrow_id, inference_id, penalty FROM rules.disputable
  WHERE epoch_index = ANY(%(epochs)s) AND (NOT %(scoped)s OR escrow_id = ANY(%(escrows)s))
)
SELECT * FROM found FULL JOIN old USING (escrow_id, inference_id, penalty)  -- rule IS NULL: no longer found
) latest ON existing.escrow_id = latest.escrow_id AND existing.inference_id = latest.inference_id
          AND existing.penalty = latest.penalty AND existing.epoch_index = ANY(%(epochs)s)
WHEN MATCHED AND latest.rule IS NULL THEN DELETE
WHEN MATCHED AND (existing.epoch_index, existing.participant, existing.executor_slot, existing.rule, existing.verdict,
                  existing.evidence, existing.rule_version)
                 IS DISTINCT FROM (latest.epoch_index, latest.participant, latest.executor_slot, latest.rule,
                                   latest.verdict, latest.evidence, %(version)s) THEN
  UPDATE SET epoch_index = latest.epoch_index, participant = latest.participant,
             executor_slot = latest.executor_slot, rule = latest.rule, verdict = latest.verdict,
             evidence = latest.evidence, rule_version = %(version)s
WHEN NOT MATCHED THEN
  INSERT (epoch_index, escrow_id, inference_id, participant, executor_slot, penalty, rule, verdict, evidence,
          rule_version, detected_at)
  VALUES (latest.epoch_index, latest.escrow_id, latest.inference_id, latest.participant, latest.executor_slot,
          latest.penalty, latest.rule, latest.verdict, latest.evidence, %(version)s, now());

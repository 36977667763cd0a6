-- One finding per error-miss: the best sibling candidate and whether verifiers should have accepted the error-miss
-- (gonka-devshard.md §2.4, §3.5 pt 6). A verifier rejects an error-miss on an unbilled pure client fault unless a
-- sibling qualifies, so, with client_fault := fn.is_client_fault_finish of the error-missed Finish:
--   accepted_current_rule  := NOT client_fault OR a sibling qualifies
--   accepted_hardened_rule := NOT client_fault OR (a sibling qualifies AND its count shows the request fits)
-- where a count shows the request fits when NOT fn.shown_over_limit(sibling.input_tokens, max_tokens, limit): the
-- proposal's sibling.input_tokens + max_tokens <= limit, with max_tokens the error-missed request's own (the sibling's
-- does not matter) and, as in every verdict, a prompt of the whole limit never fitting. A sibling whose input_tokens
-- is 0 (a billed client fault) signed no count of the prompt: its check is unknown, never a pass.
-- A sibling qualifies by its status *at the error-miss's nonce*: Finished (not yet challenged or timed out) or
-- Validated, and it must have served (output_tokens > 0). Billed client faults and non-client-fault bodies are
-- plain misses under both rules (client_fault is false). A 0/0 Finish without payload has client_fault NULL: the
-- verifiers saw the payload and we do not, so the formulas stay three-valued: accepted (true) when a sibling settles
-- it either way, unknown (NULL) otherwise; 60_disputable decides what an unknown acceptance means for the penalty.
DELETE FROM rules.sibling_finding WHERE escrow_id = ANY(%(escrows)s) AND epoch_index = ANY(%(parts)s);

INSERT INTO rules.sibling_finding (escrow_id, inference_id, epoch_index, error_miss_nonce, applied, client_fault_basis,
                                   billed, sibling_inference_id, sibling_input_tokens, sibling_output_tokens,
                                   sibling_status, governance_limit, max_tokens, accepted_current_rule,
                                   accepted_hardened_rule, rule_version)
WITH error_miss AS (
  SELECT m.escrow_id, m.inference_id, m.diff_nonce, el.epoch_index, el.model_id, el.governance_limit AS escrow_lim,
         el.limit_source
  FROM rules.escrow_limit el
  JOIN rec.error_miss_tx m ON m.escrow_id = el.escrow_id AND m.epoch_index = el.epoch_index
                         AND m.epoch_index = ANY(%(parts)s)
  WHERE el.escrow_id = ANY(%(escrows)s)
), judged AS (
  SELECT em.*, lim.governance_limit, s.max_tokens, s.prompt_hash, f.inference_id IS NOT NULL AS has_finish,
         COALESCE(f.output_tokens > 0, false) AS billed,
         fn.is_client_fault_finish(f.input_tokens, f.output_tokens, f.response_payload IS NOT NULL,
                                   parse.is_client_fault) AS client_fault,
         i.status = 'TimedOut' AND i.timeout_reason = 'error_miss' AS applied
  FROM error_miss em
  LEFT JOIN rec.start_tx s ON s.escrow_id = em.escrow_id AND s.inference_id = em.inference_id
                          AND s.epoch_index = em.epoch_index AND s.epoch_index = ANY(%(parts)s)
  -- the limit of the record's own model (its Start's), not necessarily the escrow's
  CROSS JOIN LATERAL fn.record_limit(em.model_id, em.escrow_lim, em.limit_source, em.epoch_index, s.model) lim
  LEFT JOIN rec.finish_tx f ON f.escrow_id = em.escrow_id AND f.inference_id = em.inference_id
                           AND f.epoch_index = em.epoch_index AND f.epoch_index = ANY(%(parts)s)
  LEFT JOIN rules.refusal_parse parse ON parse.escrow_id = em.escrow_id AND parse.inference_id = em.inference_id
  LEFT JOIN replay.inference i ON i.escrow_id = em.escrow_id AND i.inference_id = em.inference_id
                               AND i.epoch_index = em.epoch_index AND i.epoch_index = ANY(%(parts)s)
)
SELECT j.escrow_id, j.inference_id, j.epoch_index, j.diff_nonce, COALESCE(j.applied, false),
       -- why the miss is in question: the payload shows a client fault, or only the signed 0/0 suggests one
       -- (an executor signs 0/0 only for a client fault, §2.1; the payload that would confirm it is not stored)
       CASE WHEN j.client_fault THEN 'payload' WHEN j.client_fault IS NULL THEN 'zero_zero_presumed' END,
       j.billed, candidate.sibling_inference_id, candidate.input_tokens, candidate.output_tokens, candidate.status,
       j.governance_limit, j.max_tokens,
       CASE WHEN j.has_finish THEN NOT j.client_fault OR candidate.sibling_inference_id IS NOT NULL END,
       CASE WHEN j.has_finish THEN NOT j.client_fault
                                   OR (candidate.sibling_inference_id IS NOT NULL AND candidate.shows_fit) END,
       %(version)s
FROM judged j
LEFT JOIN LATERAL (
  SELECT sibling.sibling_inference_id, sibling.input_tokens, sibling.output_tokens, sibling_record.status,
         NOT fn.shown_over_limit(NULLIF(sibling.input_tokens, 0), j.max_tokens, j.governance_limit) AS shows_fit
  FROM fn.sibling_finishes(j.escrow_id, j.prompt_hash, j.inference_id, %(parts)s::bigint[]) sibling
  JOIN replay.inference sibling_record ON sibling_record.escrow_id = j.escrow_id
                                      AND sibling_record.inference_id = sibling.sibling_inference_id
                                      AND sibling_record.epoch_index = j.epoch_index
                                      AND sibling_record.epoch_index = ANY(%(parts)s)
  WHERE sibling.output_tokens > 0
    AND sibling_record.finished_nonce <= j.diff_nonce
    AND (sibling_record.timed_out_nonce IS NULL OR sibling_record.timed_out_nonce > j.diff_nonce)
    AND (sibling_record.challenged_nonce IS NULL OR sibling_record.challenged_nonce > j.diff_nonce
         OR (sibling_record.status = 'Validated' AND sibling_record.resolved_nonce <= j.diff_nonce))
  -- one that passes the hardened rule if any (it decides both rules), else one that fails it, else the smallest
  -- served prompt
  ORDER BY shows_fit DESC NULLS LAST, sibling.input_tokens, sibling.sibling_inference_id
  LIMIT 1
) candidate ON true;

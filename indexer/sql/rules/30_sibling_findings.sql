-- One finding per error-miss: the best sibling candidate and whether verifiers should have accepted the
-- error-miss under today's rule and under the hardened rule (sibling.input_tokens + max_tokens <= limit).
-- A sibling qualifies by its status *at the error-miss's nonce*: Finished (not yet challenged or timed out)
-- or Validated. Billed client faults and non-client-fault bodies are plain misses under both rules.
DELETE FROM rules.sibling_finding WHERE escrow_id = ANY(%(escrows)s);

INSERT INTO rules.sibling_finding
WITH em AS (
  SELECT m.escrow_id, m.inference_id, m.diff_nonce, el.epoch_index, el.governance_limit
  FROM rules.escrow_limit el
  JOIN rec.error_miss_tx m ON m.escrow_id = el.escrow_id
  WHERE el.escrow_id = ANY(%(escrows)s)
), judged AS (
  SELECT em.*, s.max_tokens, s.prompt_hash, f.inference_id IS NOT NULL AS has_finish,
         COALESCE(f.output_tokens > 0, false) AS billed,
         CASE WHEN f.output_tokens = 0 AND p.is_client_fault THEN 'payload'
              WHEN f.output_tokens = 0 AND f.input_tokens = 0 AND f.response_payload IS NULL THEN 'zero_zero_presumed'
         END AS client_fault_basis,
         i.status = 'TimedOut' AND i.timeout_reason = 'error_miss' AS applied
  FROM em
  LEFT JOIN rec.start_tx s ON s.escrow_id = em.escrow_id AND s.inference_id = em.inference_id
  LEFT JOIN rec.finish_tx f ON f.escrow_id = em.escrow_id AND f.inference_id = em.inference_id
  LEFT JOIN rules.refusal_parse p ON p.escrow_id = em.escrow_id AND p.inference_id = em.inference_id
  LEFT JOIN replay.inference i ON i.escrow_id = em.escrow_id AND i.inference_id = em.inference_id
)
SELECT j.escrow_id, j.inference_id, j.epoch_index, j.diff_nonce, COALESCE(j.applied, false), j.client_fault_basis,
       j.billed, c.inference_id, c.input_tokens, c.output_tokens, c.status, j.governance_limit, j.max_tokens,
       CASE WHEN NOT j.has_finish THEN NULL
            WHEN j.client_fault_basis IS NULL THEN true
            ELSE c.inference_id IS NOT NULL END,
       CASE WHEN NOT j.has_finish THEN NULL
            WHEN j.client_fault_basis IS NULL THEN true
            WHEN c.inference_id IS NULL THEN false
            ELSE c.input_tokens + j.max_tokens <= j.governance_limit END,
       %(version)s
FROM judged j
LEFT JOIN LATERAL (
  SELECT sf.inference_id, sf.input_tokens, sf.output_tokens, si.status
  FROM rec.start_tx s2
  JOIN rec.finish_tx sf ON sf.escrow_id = s2.escrow_id AND sf.inference_id = s2.inference_id AND sf.output_tokens > 0
  JOIN replay.inference si ON si.escrow_id = s2.escrow_id AND si.inference_id = s2.inference_id
  WHERE s2.escrow_id = j.escrow_id AND s2.prompt_hash = j.prompt_hash AND j.prompt_hash <> ''
    AND s2.inference_id <> j.inference_id
    AND si.finished_nonce <= j.diff_nonce
    AND (si.timed_out_nonce IS NULL OR si.timed_out_nonce > j.diff_nonce)
    AND (si.challenged_nonce IS NULL OR si.challenged_nonce > j.diff_nonce
         OR (si.status = 'Validated' AND si.resolved_nonce <= j.diff_nonce))
  ORDER BY (sf.input_tokens + j.max_tokens <= j.governance_limit) DESC NULLS LAST, sf.input_tokens, sf.inference_id
  LIMIT 1
) c ON true;

-- One verdict per 0/0 Finish against the governance limit. Prompt tokens from the most trusted evidence:
-- sibling (signed input_tokens of another Finish of the same prompt in the escrow; the largest, so any served
-- count that shows the request cannot fit protects the host) > error_text (the executor's own vLLM message,
-- possibly a lower bound) > input_length (the gateway's estimate: recorded, never decisive).
DELETE FROM rules.context_refusal WHERE escrow_id = ANY(%(escrows)s);

INSERT INTO rules.context_refusal
WITH zero AS (
  SELECT f.escrow_id, f.inference_id, f.has_payload, el.epoch_index, el.model_id, el.governance_limit,
         el.limit_source, s.max_tokens, s.input_length, s.prompt_hash
  FROM rules.escrow_limit el
  CROSS JOIN LATERAL (  -- probe each escrow's 0/0 Finishes (OFFSET 0 keeps the planner from flattening this into
                        -- a walk over every epoch's refusals: it underestimates input = 0 AND output = 0)
    SELECT escrow_id, inference_id, response_payload IS NOT NULL AS has_payload FROM rec.finish_tx
    WHERE escrow_id = el.escrow_id AND input_tokens = 0 AND output_tokens = 0 OFFSET 0) f
  LEFT JOIN rec.start_tx s ON s.escrow_id = f.escrow_id AND s.inference_id = f.inference_id  -- once per refusal
  WHERE el.escrow_id = ANY(%(escrows)s)
), sib AS (
  SELECT z.escrow_id, z.inference_id, max(sf.input_tokens) AS max_in, min(sf.input_tokens) AS min_in,
         count(*) AS n, (array_agg(sf.inference_id ORDER BY sf.input_tokens DESC, sf.inference_id))[1] AS sib_id
  FROM zero z
  JOIN rec.start_tx s2 ON s2.escrow_id = z.escrow_id AND s2.prompt_hash = z.prompt_hash
                      AND s2.inference_id <> z.inference_id
  JOIN rec.finish_tx sf ON sf.escrow_id = s2.escrow_id AND sf.inference_id = s2.inference_id AND sf.input_tokens > 0
  WHERE z.prompt_hash <> ''
  GROUP BY z.escrow_id, z.inference_id
), chosen AS (
  SELECT z.*, p.refusal_kind, p.error_code, p.reported_limit, p.reported_prompt_tokens,
         p.reported_prompt_is_lower_bound, p.reported_max_tokens, p.family, p.requested_total,
         sib.max_in, sib.min_in, sib.n AS sib_n, sib.sib_id,
         CASE WHEN sib.max_in IS NOT NULL THEN 'sibling'
              WHEN p.reported_prompt_tokens IS NOT NULL THEN 'error_text'
              WHEN z.input_length IS NOT NULL THEN 'input_length' END AS source
  FROM zero z
  LEFT JOIN rules.refusal_parse p ON p.escrow_id = z.escrow_id AND p.inference_id = z.inference_id AND z.has_payload
  LEFT JOIN sib ON sib.escrow_id = z.escrow_id AND sib.inference_id = z.inference_id
), decided AS (
  SELECT c.*,
         CASE c.source WHEN 'sibling' THEN c.max_in WHEN 'error_text' THEN c.reported_prompt_tokens
                       WHEN 'input_length' THEN c.input_length END AS prompt_tokens,
         (c.source = 'error_text' AND c.reported_prompt_is_lower_bound) AS lower_bound,
         -- the count that may decide: exact or lower bound from signed tokens or the executor's text, never the estimate
         CASE c.source WHEN 'sibling' THEN c.max_in WHEN 'error_text' THEN c.reported_prompt_tokens END AS p
  FROM chosen c
)
SELECT d.escrow_id, d.inference_id, d.epoch_index, d.model_id, i.executor_slot, i.executor_address, i.status,
       i.penalty, COALESCE(d.refusal_kind, 'unknown'), d.error_code, d.reported_limit, d.reported_prompt_tokens,
       d.reported_prompt_is_lower_bound, d.reported_max_tokens, d.governance_limit, d.limit_source, d.max_tokens,
       d.input_length, d.prompt_tokens, d.source, COALESCE(d.lower_bound, false),
       CASE WHEN d.governance_limit IS NULL THEN 'undetermined'
            WHEN fn.shown_over_limit(d.p, d.max_tokens, d.governance_limit) THEN 'over_limit'
            WHEN d.p IS NOT NULL AND d.max_tokens IS NOT NULL AND NOT COALESCE(d.lower_bound, false) THEN 'fits'
            ELSE 'undetermined' END,
       jsonb_strip_nulls(jsonb_build_object(
         'governance_limit', d.governance_limit, 'limit_source', d.limit_source, 'max_tokens', d.max_tokens,
         'input_length', d.input_length,
         'sibling', CASE WHEN d.sib_id IS NOT NULL THEN jsonb_build_object(
             'inference_id', d.sib_id, 'input_tokens', d.max_in, 'min_input_tokens', d.min_in, 'siblings', d.sib_n) END,
         'error_text', CASE WHEN d.refusal_kind IS NOT NULL THEN jsonb_build_object(
             'refusal_kind', d.refusal_kind, 'family', d.family, 'error_code', d.error_code,
             'reported_limit', d.reported_limit, 'reported_prompt_tokens', d.reported_prompt_tokens,
             'lower_bound', d.reported_prompt_is_lower_bound, 'reported_max_tokens', d.reported_max_tokens,
             'requested_total', d.requested_total) END,
         'payload', d.has_payload)),
       %(version)s
FROM decided d
LEFT JOIN replay.inference i ON i.escrow_id = d.escrow_id AND i.inference_id = d.inference_id;

-- One verdict per applied 0/0 Finish against the governance limit. Prompt tokens from the most trusted evidence:
-- sibling (signed input_tokens of another Finish of the same prompt in the escrow; the largest, fn.largest_sibling,
-- so any served count that shows the request cannot fit protects the host) > error_text (the executor's own vLLM
-- message, possibly a lower bound) > input_length (the gateway's estimate: recorded, never decisive).
DELETE FROM rules.context_refusal WHERE escrow_id = ANY(%(escrows)s) AND epoch_index = ANY(%(parts)s);

INSERT INTO rules.context_refusal (escrow_id, inference_id, epoch_index, model_id, executor_slot, executor_address,
                                   status, penalty, refusal_kind, error_code, reported_limit, reported_prompt_tokens,
                                   reported_prompt_is_lower_bound, reported_max_tokens, governance_limit, limit_source,
                                   max_tokens, input_length, prompt_tokens, prompt_tokens_source,
                                   prompt_is_lower_bound, verdict, evidence, rule_version)
WITH zero AS (
  SELECT f.escrow_id, f.inference_id, f.has_payload, el.epoch_index, lim.model_id, lim.governance_limit,
         lim.limit_source, s.max_tokens, s.input_length, s.prompt_hash
  FROM rules.escrow_limit el
  CROSS JOIN LATERAL (  -- probe each escrow's 0/0 Finishes (OFFSET 0 keeps the planner from flattening this into
                        -- a walk over every epoch's refusals: it underestimates input = 0 AND output = 0)
    SELECT escrow_id, inference_id, diff_nonce, response_payload IS NOT NULL AS has_payload FROM rec.finish_tx
    WHERE escrow_id = el.escrow_id AND epoch_index = el.epoch_index AND epoch_index = ANY(%(parts)s)
      AND input_tokens = 0 AND output_tokens = 0
    OFFSET 0) f
  -- only a Finish the escrow applied: one the state machine rejected (say, naming a slot that is not the executor's)
  -- is no refusal by the record's executor, and the limit its text states is no one's
  JOIN replay.inference applied ON applied.escrow_id = f.escrow_id AND applied.inference_id = f.inference_id
                               AND applied.epoch_index = el.epoch_index AND applied.epoch_index = ANY(%(parts)s)
                               AND applied.finished_nonce = f.diff_nonce
  LEFT JOIN rec.start_tx s ON s.escrow_id = f.escrow_id AND s.inference_id = f.inference_id  -- once per refusal
                          AND s.epoch_index = el.epoch_index AND s.epoch_index = ANY(%(parts)s)
  -- the limit of the record's own model (its Start's), not necessarily the escrow's
  CROSS JOIN LATERAL fn.record_limit(el.model_id, el.governance_limit, el.limit_source, el.epoch_index, s.model) lim
  WHERE el.escrow_id = ANY(%(escrows)s)
), chosen AS (
  SELECT z.*, parse.refusal_kind, parse.error_code, parse.reported_limit, parse.reported_prompt_tokens,
         parse.reported_prompt_is_lower_bound, parse.reported_max_tokens, parse.family, parse.requested_total,
         sib.sibling_inference_id, sib.sibling_input_tokens, sib.min_input_tokens AS sibling_min_input_tokens,
         sib.siblings,
         CASE WHEN sib.sibling_input_tokens IS NOT NULL THEN 'sibling'
              WHEN parse.reported_prompt_tokens IS NOT NULL THEN 'error_text'
              WHEN z.input_length IS NOT NULL THEN 'input_length' END AS source
  FROM zero z
  -- a parse left from an earlier payload of an amended Finish does not describe a Finish that now has none
  LEFT JOIN rules.refusal_parse parse ON parse.escrow_id = z.escrow_id AND parse.inference_id = z.inference_id
                                     AND z.has_payload
  LEFT JOIN LATERAL fn.largest_sibling(z.escrow_id, z.prompt_hash, z.inference_id, %(parts)s::bigint[]) sib ON true
), decided AS (
  SELECT c.*,
         CASE c.source WHEN 'sibling' THEN c.sibling_input_tokens WHEN 'error_text' THEN c.reported_prompt_tokens
                       WHEN 'input_length' THEN c.input_length END AS prompt_tokens,
         (c.source = 'error_text' AND c.reported_prompt_is_lower_bound) AS lower_bound,
         -- the count that may decide: exact or lower bound, from signed tokens or the executor's text; never the
         -- gateway's estimate
         CASE c.source WHEN 'sibling' THEN c.sibling_input_tokens
                       WHEN 'error_text' THEN c.reported_prompt_tokens END AS deciding_prompt_tokens
  FROM chosen c
)
SELECT d.escrow_id, d.inference_id, d.epoch_index, d.model_id, i.executor_slot, i.executor_address, i.status,
       i.penalty, COALESCE(d.refusal_kind, 'unknown'), d.error_code, d.reported_limit, d.reported_prompt_tokens,
       -- whether the stated count is a lower bound: unknown (NULL) when the text states no count
       CASE WHEN d.reported_prompt_tokens IS NOT NULL THEN d.reported_prompt_is_lower_bound END, d.reported_max_tokens, d.governance_limit, d.limit_source, d.max_tokens,
       d.input_length, d.prompt_tokens, d.source, COALESCE(d.lower_bound, false),
       -- interface.md §3 verdict: over_limit on any evidence that shows it, fits only on an exact count
       CASE WHEN d.governance_limit IS NULL THEN 'undetermined'
            WHEN fn.shown_over_limit(d.deciding_prompt_tokens, d.max_tokens, d.governance_limit) THEN 'over_limit'
            WHEN d.deciding_prompt_tokens IS NOT NULL AND d.max_tokens IS NOT NULL
                 AND NOT COALESCE(d.lower_bound, false) THEN 'fits'
            ELSE 'undetermined' END,
       jsonb_strip_nulls(jsonb_build_object(
         'governance_limit', d.governance_limit, 'limit_source', d.limit_source, 'max_tokens', d.max_tokens,
         'input_length', d.input_length,
         'sibling', CASE WHEN d.sibling_inference_id IS NOT NULL THEN jsonb_build_object(
             'inference_id', d.sibling_inference_id, 'input_tokens', d.sibling_input_tokens,
             'min_input_tokens', d.sibling_min_input_tokens, 'siblings', d.siblings) END,
         'error_text', CASE WHEN d.refusal_kind IS NOT NULL THEN jsonb_build_object(
             'refusal_kind', d.refusal_kind, 'family', d.family, 'error_code', d.error_code,
             'reported_limit', d.reported_limit, 'reported_prompt_tokens', d.reported_prompt_tokens,
             'lower_bound', d.reported_prompt_is_lower_bound, 'reported_max_tokens', d.reported_max_tokens,
             'requested_total', d.requested_total) END,
         'payload', d.has_payload)),
       %(version)s
FROM decided d
LEFT JOIN replay.inference i ON i.escrow_id = d.escrow_id AND i.inference_id = d.inference_id
                            AND i.epoch_index = ANY(%(parts)s);

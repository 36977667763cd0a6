-- fn.shown_over_limit(prompt, max_tokens, lim): the request is shown not to fit the governance limit — its
-- max_tokens alone exceeds it, or the prompt alone reaches it, or prompt + max_tokens exceeds it (vLLM refuses
-- prompt + max_tokens > max-model-len, and a prompt of exactly the limit leaves no room to generate). Unknown
-- inputs prove nothing: the result is then NULL or false. One definition for every rule that needs it; a plain
-- SQL expression, so the planner inlines it. The sum in numeric: two counts a record may carry (up to 2^63 - 1
-- each) add past bigint, and one such record would otherwise stop the rules stage of its epoch.
CREATE FUNCTION fn.shown_over_limit(prompt bigint, max_tokens bigint, lim bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT max_tokens > lim OR prompt >= lim OR prompt::numeric + max_tokens > lim
$$;

-- fn.record_limit: the governance limit a record is judged against, limit(rec.model) of gonka-devshard.md §2.4 —
-- the model its Start signed (the escrow's model when the Start names none). For the escrow's own model, the
-- escrow's limit (10_limits: its frozen max_model_len, else the snapshot's args); for another model, that model's
-- --max-model-len in the epoch's snapshot (the escrow's max_model_len was frozen from the escrow's model, not this
-- one). A model the snapshot has no limit for leaves the limit unknown (NULL). One row, always; inlined.
CREATE FUNCTION fn.record_limit(escrow_model text, escrow_lim bigint, escrow_source text, epoch bigint,
                                start_model text)
RETURNS TABLE (model_id text, governance_limit bigint, limit_source text)
LANGUAGE sql STABLE AS $$
  SELECT own.model_id,
         CASE WHEN own.escrows THEN escrow_lim ELSE m.args_limit END,
         CASE WHEN own.escrows THEN escrow_source WHEN m.args_limit IS NOT NULL THEN 'model_args' END
  FROM (SELECT COALESCE(NULLIF(start_model, ''), escrow_model) AS model_id,
               NULLIF(start_model, '') IS NULL OR start_model IS NOT DISTINCT FROM escrow_model AS escrows) own
  LEFT JOIN rules.model_limit m ON m.epoch_index = epoch AND m.model_id = own.model_id AND NOT own.escrows
$$;

-- fn.shown_over_limit(prompt, max_tokens, lim): the request is shown not to fit the governance limit — its
-- max_tokens alone exceeds it, or the prompt alone reaches it, or prompt + max_tokens exceeds it (vLLM refuses
-- prompt + max_tokens > max-model-len, and a prompt of exactly the limit leaves no room to generate). Unknown
-- inputs prove nothing: the result is then NULL or false. One definition for every rule that needs it; a plain
-- SQL expression, so the planner inlines it.
CREATE FUNCTION fn.shown_over_limit(prompt bigint, max_tokens bigint, lim bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT max_tokens > lim OR prompt >= lim OR prompt + max_tokens > lim
$$;

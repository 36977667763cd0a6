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

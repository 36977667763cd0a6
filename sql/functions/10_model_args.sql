-- fn.max_model_len(args): the --max-model-len that vLLM would run with, given model args as governance set them.
-- Both '--max-model-len N' and '--max-model-len=N'; the last occurrence wins (argparse). vLLM's parser
-- (FlexibleArgumentParser) turns '_' into '-' in an option's name before argparse sees it, so '--max_model_len' and
-- any mix of '_' and '-' name the same flag. Values as vLLM's human_readable_int reads them (fn.parse_token_count);
-- 0 is unknown, as the escrow's max_model_len 0 that #1763 freezes from these args (a limit of 0 would show every
-- request over it).
-- Also reports how often the flag occurs and whether both forms occur (the MergeModelArgs loophole, #1911).

-- fn.parse_token_count(v): a count as vLLM's human_readable_int parses it, NULL where vLLM would not start:
--   plain digits               the integer
--   N + k/m/g (10^3/6/9)       int(float(N) * 10^k): a double product truncated, so '25.6k' = 25600 but
--                              '4.1m' = 4099999, exactly as vLLM runs it (double to bigint is exact); NULL past bigint
--   N + K/M/G (2^10/20/30)     N * 2^k for whole N only (vLLM refuses '1.5K')
CREATE FUNCTION fn.parse_token_count(v text) RETURNS bigint LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT CASE WHEN m[3] IN ('k', 'm', 'g') THEN
                (SELECT CASE WHEN product < 9223372036854775807::float8 THEN trunc(product)::bigint END
                 FROM (SELECT m[1]::float8 * CASE m[3] WHEN 'k' THEN 1e3 WHEN 'm' THEN 1e6 ELSE 1e9 END::float8
                              AS product) p)
              WHEN m[2] IS NOT NULL THEN NULL  -- a fraction without a decimal suffix: vLLM refuses it
              ELSE fn.bigint_or_null(m[1]::numeric * CASE m[3] WHEN 'K' THEN 1024 WHEN 'M' THEN 1048576
                                                                WHEN 'G' THEN 1073741824 ELSE 1 END) END
  FROM (SELECT regexp_match(btrim(v), '^([0-9]{1,30}(\.[0-9]{1,30})?)([kmgKMG]?)$') AS m) s
  WHERE m IS NOT NULL
$$;

CREATE FUNCTION fn.max_model_len(args text[], OUT args_limit bigint, OUT occurrences integer,
                                 OUT mixed_forms boolean)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  i integer := 1;
  n integer := coalesce(cardinality(args), 0);
  tok text;
  flag text;  -- the token's option name as vLLM reads it: up to any '=', '_' as '-'
  two_token boolean := false;
  one_token boolean := false;
BEGIN
  occurrences := 0;
  WHILE i <= n LOOP
    tok := args[i];
    flag := replace(split_part(tok, '=', 1), '_', '-');
    IF flag = '--max-model-len' AND strpos(tok, '=') = 0 THEN
      occurrences := occurrences + 1; two_token := true;
      args_limit := CASE WHEN i < n THEN NULLIF(fn.parse_token_count(args[i + 1]), 0) END;
      i := i + 2;
      CONTINUE;
    ELSIF flag = '--max-model-len' THEN
      occurrences := occurrences + 1; one_token := true;
      args_limit := NULLIF(fn.parse_token_count(substr(tok, strpos(tok, '=') + 1)), 0);
    END IF;
    i := i + 1;
  END LOOP;
  mixed_forms := two_token AND one_token;
END $$;

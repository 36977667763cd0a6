-- fn.max_model_len(args): the --max-model-len that vLLM would run with, given model args as governance set them.
-- Both '--max-model-len N' and '--max-model-len=N'; the last occurrence wins (argparse). Values may use vLLM's
-- human-readable suffixes: k/m/g = 10^3/10^6/10^9, K/M/G = 2^10/2^20/2^30 (e.g. 25.6k = 25600).
-- Also reports how often the flag occurs and whether both forms occur (the MergeModelArgs loophole, #1911).
CREATE FUNCTION fn.parse_token_count(v text) RETURNS bigint LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT CASE WHEN x = trunc(x) THEN fn.bigint_or_null(x) END
  FROM (SELECT m[1]::numeric * CASE m[3] WHEN 'k' THEN 1000 WHEN 'm' THEN 1000000 WHEN 'g' THEN 1000000000
                                         WHEN 'K' THEN 1024 WHEN 'M' THEN 1048576 WHEN 'G' THEN 1073741824
                                         ELSE 1 END AS x
        FROM (SELECT regexp_match(btrim(v), '^([0-9]{1,18}(\.[0-9]{1,9})?)([kmgKMG]?)$') AS m) s
        WHERE m IS NOT NULL) t
$$;

CREATE FUNCTION fn.max_model_len(args text[], OUT args_limit bigint, OUT occurrences integer,
                                 OUT mixed_forms boolean)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  i integer := 1;
  n integer := coalesce(cardinality(args), 0);
  tok text;
  two_token boolean := false;
  one_token boolean := false;
BEGIN
  occurrences := 0;
  WHILE i <= n LOOP
    tok := args[i];
    IF tok = '--max-model-len' THEN
      occurrences := occurrences + 1; two_token := true;
      args_limit := CASE WHEN i < n THEN fn.parse_token_count(args[i + 1]) END;
      i := i + 2;
      CONTINUE;
    ELSIF left(tok, 16) = '--max-model-len=' THEN
      occurrences := occurrences + 1; one_token := true;
      args_limit := fn.parse_token_count(substr(tok, 17));
    END IF;
    i := i + 1;
  END LOOP;
  mixed_forms := two_token AND one_token;
END $$;

-- fn.bigint_or_null(x): an exact numeric as bigint when it fits, else NULL (unknown, never capped and never an
-- error). The chain's counts are uint64 and a record may carry any up to 2^63 - 1, so a sum of two, or a parsed
-- suffix like 25.6G, can pass bigint: one row then must not stop the statement that reads it. Not STRICT, so the
-- planner inlines it (NULL gives NULL all the same).
CREATE FUNCTION fn.bigint_or_null(x numeric) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN x BETWEEN -9223372036854775808 AND 9223372036854775807 THEN x::bigint END
$$;

-- fn.chain_decimal(d): a decimal as the chain publishes it, exactly, as numeric. inference.Decimal is
-- {"value": "<integer>", "exponent": <integer>} meaning value x 10^exponent (e.g. {"value":"18","exponent":-2} is
-- 0.18); a decimal string or JSON number is read as written. Built as '<value>e<exponent>' so numeric's own input
-- does the scaling: no division, no float, no rounding. JSON null (or SQL null) gives null; a malformed value
-- raises (invalid input syntax for type numeric).
CREATE FUNCTION fn.chain_decimal(d jsonb) RETURNS numeric LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT CASE jsonb_typeof(d)
           WHEN 'object' THEN CASE WHEN d ? 'value' AND jsonb_typeof(d -> 'value') <> 'null'
                                   THEN ((d ->> 'value') || 'e' || COALESCE(d ->> 'exponent', '0'))::numeric END
           WHEN 'string' THEN (d #>> '{}')::numeric
           WHEN 'number' THEN (d #>> '{}')::numeric
         END
$$;

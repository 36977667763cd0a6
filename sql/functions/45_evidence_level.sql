-- The evidence levels of an escrow's log (replay.escrow_verification, api.escrow_verification), weakest first: the
-- one definition of their order. none: nothing verified yet, or no log that passes; signed: every diff's user
-- signature recovers to the escrow's creator; replayed: every signed post_state_root is recomputed by the replay;
-- settled: the final settlement-phase root is the settled one, signed by a quorum of the escrow's hosts.
CREATE FUNCTION fn.evidence_levels() RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ARRAY['none', 'signed', 'replayed', 'settled']
$$;

-- fn.evidence_rank(level): the level's place in that order, 0 (none) to 3 (settled). NULL gives NULL (a caller
-- decides what an absent level means); a name outside the order raises, so a new level cannot sort silently.
CREATE FUNCTION fn.evidence_rank(level text) RETURNS integer LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  at integer := array_position(fn.evidence_levels(), level);
BEGIN
  IF at IS NULL THEN
    RAISE EXCEPTION USING MESSAGE = 'unknown evidence level ' || quote_literal(level) || ': the levels are '
      || array_to_string(fn.evidence_levels(), ', '), ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN at - 1;
END
$$;

-- fn.evidence_level(rank): the level of a rank, the inverse of fn.evidence_rank. NULL gives NULL, so the weakest
-- level of no escrows, fn.evidence_level(min(fn.evidence_rank(level))) over no rows, is NULL and never 'none'.
CREATE FUNCTION fn.evidence_level(rank integer) RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  IF rank < 0 OR rank >= cardinality(fn.evidence_levels()) THEN
    RAISE EXCEPTION USING MESSAGE = 'evidence rank ' || rank || ' is outside 0..'
      || (cardinality(fn.evidence_levels()) - 1), ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN (fn.evidence_levels())[rank + 1];
END
$$;

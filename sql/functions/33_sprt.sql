-- The chain's invalidation SPRT (docs/chain-math.md): gonka-ai/gonka inference-chain/x/inference/calculations/
-- sprt.go + status.go getInvalidationStatus, v0.2.5 on (before v0.2.5 the chain used a float z-score rule and
-- has no SPRT; calling for those versions is an error). Per validation result the chain adds, in shopspring
-- decimals, logFail = Ln(p1.Div(p0), 12) for an invalidation and logPass = Ln((1-p1).Div(1-p0), 12) for a
-- validation to the host's InvalidLLR, and marks the host INVALID as soon as LLR >= invalidation_h_threshold.
-- There is no lower bound, no reset within the epoch and no minimum sample; LLR <= -H ("Pass") changes nothing.
-- The LLR restarts at 0 with each epoch's CurrentEpochStats; once INVALID the chain stops updating it.

-- shopspring/decimal v1.4.0 Decimal.Ln(precision), ported step by step (power series near 1, else reduction to
-- [0.1, 1) plus Halley's iteration from a float64 estimate, ExpTaylor, DivRound at precision + 2, Round).
CREATE OR REPLACE FUNCTION fn.go_ln(d numeric, prec int)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  calc int := prec + 2;
  z numeric := d;
  comp1 numeric; comp2 numeric; comp3 numeric; comp4 numeric;
  reduce_adjust numeric := 0;
  prev_step numeric := 0;
  exp_delta int;
  use_series boolean := false;
  eps numeric := fn.ten_pow(-(prec + 2));
  n int;
  i int;
  ln10_digits text := '2.302585092994045684017991454684364207601101488628772976033327900967572609677352480235997205089598298';
  ln10_p numeric;
  idx int;
  pp int;
BEGIN
  IF d < 0 THEN
    RAISE EXCEPTION 'cannot calculate natural logarithm for negative decimals' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF d = 0 THEN
    RAISE EXCEPTION 'cannot represent natural logarithm of 0, result: -infinity' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  comp1 := z - 1;
  IF abs(comp1) <= 0.1 THEN
    use_series := true;
  ELSE
    -- NumDigits + exp: the power of ten that brings z into [0.1, 1)
    exp_delta := floor(log(10, z))::int + 1;
    IF z * fn.ten_pow(-exp_delta) >= 1 THEN exp_delta := exp_delta + 1; END IF;   -- log() rounding guard
    IF z * fn.ten_pow(-exp_delta) < 0.1 THEN exp_delta := exp_delta - 1; END IF;
    z := z * fn.ten_pow(-exp_delta);
    -- ln10.withPrecision(calc): the truncated approximation with 2^i - 1 decimals
    idx := 0; pp := calc;
    IF pp >= 1 THEN idx := idx + 1; END IF;
    WHILE pp >= 16 LOOP pp := pp / 16; idx := idx + 4; END LOOP;
    WHILE pp >= 2 LOOP pp := pp / 2; idx := idx + 1; END LOOP;
    IF (1 << idx) - 1 > length(ln10_digits) - 2 THEN
      RAISE EXCEPTION USING MESSAGE = 'go_ln: precision ' || coalesce((prec)::text, 'NULL') || ' needs more digits of ln(10) than embedded';
    END IF;
    ln10_p := left(ln10_digits, 1 + (1 << idx))::numeric;
    reduce_adjust := exp_delta * ln10_p;
    comp1 := z - 1;
    IF abs(comp1) <= 0.1 THEN
      use_series := true;
    ELSE
      comp1 := fn.f64_shortest(ln(z::float8));    -- NewFromFloat(math.Log(z.InexactFloat64()))
    END IF;
  END IF;

  IF use_series THEN
    comp2 := comp1 + 2;
    comp3 := fn.go_div_round(comp1, comp2, calc);
    comp1 := comp3 + comp3;
    comp2 := comp1;
    n := 1;
    LOOP
      comp2 := comp2 * comp3 * comp3;
      comp4 := fn.go_div_round(comp2, 2 * n + 1, calc);
      comp1 := comp1 + comp4;
      EXIT WHEN abs(comp4) <= eps;
      n := n + 1;
    END LOOP;
  ELSE
    FOR i IN 0 .. calc * 2 + 10 - 1 LOOP
      comp3 := fn.go_exp_taylor(comp1, calc);
      comp2 := comp3 - z;
      comp2 := comp2 + comp2;
      comp4 := comp3 + z;
      comp3 := fn.go_div_round(comp2, comp4, calc);
      comp1 := comp1 - comp3;
      EXIT WHEN prev_step + comp3 = 0;
      EXIT WHEN abs(comp3) <= eps;
      prev_step := comp3;
    END LOOP;
  END IF;
  RETURN round(comp1 + reduce_adjust, prec);
END $$;

-- shopspring/decimal v1.4.0 Decimal.ExpTaylor(precision), precision >= 0.
CREATE OR REPLACE FUNCTION fn.go_exp_taylor(d numeric, prec int)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  eps numeric := fn.ten_pow(-prec - 1);
  dabs numeric := abs(d);
  pw numeric := abs(d);
  fact numeric := 1;
  result numeric := 1;
  step numeric;
  i bigint := 1;
BEGIN
  IF d = 0 THEN
    RETURN 1;
  END IF;
  LOOP
    step := fn.go_div_round(pw, fact, prec + 1);
    result := result + step;
    EXIT WHEN step < eps;
    pw := pw * dabs;
    i := i + 1;
    fact := fact * i;
  END LOOP;
  IF d < 0 THEN
    result := fn.go_div_round(1, result, prec + 1);
  END IF;
  RETURN round(result, prec);
END $$;

-- The two per-result increments the chain adds, (log_fail, log_pass), for a chain version.
--   v0.2.5..v0.2.10 (NewSPRT, calculations/sprt.go 0becc23a8): p0, p1 must lie in (0, 1), else the chain's
--     NewSPRT error (the host then stays ACTIVE with reason algorithm_error): raised here.
--   v0.2.11 on (keeper/sprt_precompute.go CalculateLogLLR, bd1fd5083): p0, p1 in [0, 1], else
--     PrecomputeSPRTValues' error (raised here); p0 or p1 = 0 gives log_fail 0, p0 or p1 = 1 gives log_pass 0.
CREATE OR REPLACE FUNCTION fn.sprt_log_terms(p0 numeric, p1 numeric, chain_version text DEFAULT NULL,
                                             OUT log_fail numeric, OUT log_pass numeric)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v int := fn.chain_version_ordinal(chain_version);
BEGIN
  IF v < 6 THEN
    RAISE EXCEPTION USING MESSAGE = 'chain version ' || coalesce((chain_version)::text, 'NULL') || ' has no invalidation SPRT (it first appears in v0.2.5)', ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p0 IS NULL OR p1 IS NULL THEN
    RETURN;
  END IF;
  IF v < 12 THEN
    IF NOT (p0 > 0 AND p0 < 1 AND p1 > 0 AND p1 < 1) THEN
      RAISE EXCEPTION USING MESSAGE = 'P0 and P1 must be in (0,1) (p0 ' || coalesce((p0)::text, 'NULL') || ', p1 ' || coalesce((p1)::text, 'NULL') || ')', ERRCODE = 'invalid_parameter_value';
    END IF;
    log_fail := fn.go_ln(fn.go_div_round(p1, p0, 16), 12);
    log_pass := fn.go_ln(fn.go_div_round(1 - p1, 1 - p0, 16), 12);
    RETURN;
  END IF;
  IF p1 < 0 OR p1 > 1 THEN
    RAISE EXCEPTION USING MESSAGE = 'BadParticipantInvalidationRate must be between 0 and 1, got: ' || coalesce((p1)::text, 'NULL'), ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p0 < 0 OR p0 > 1 THEN
    RAISE EXCEPTION USING MESSAGE = 'FalsePositiveRate must be between 0 and 1, got: ' || coalesce((p0)::text, 'NULL'), ERRCODE = 'invalid_parameter_value';
  END IF;
  log_fail := CASE WHEN p1 = 0 OR p0 = 0 THEN 0 ELSE fn.go_ln(fn.go_div_round(p1, p0, 16), 12) END;
  log_pass := CASE WHEN p1 = 1 OR p0 = 1 THEN 0 ELSE fn.go_ln(fn.go_div_round(1 - p1, 1 - p0, 16), 12) END;
END $$;

-- fn.sprt_llr(invalid, total, p0, p1 [, chain_version]): the LLR after `invalid` invalidations and
-- total - invalid validations (total = validated + invalidated results), exact: invalid*log_fail + valid*log_pass.
CREATE OR REPLACE FUNCTION fn.sprt_llr(invalid bigint, total bigint, p0 numeric, p1 numeric,
                                       chain_version text DEFAULT NULL)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  t record;
BEGIN
  SELECT * INTO t FROM fn.sprt_log_terms(p0, p1, chain_version);
  IF invalid IS NULL OR total IS NULL OR t.log_fail IS NULL THEN
    RETURN NULL;
  END IF;
  IF invalid < 0 OR total < 0 OR invalid > total THEN
    RAISE EXCEPTION USING MESSAGE = 'invalid input: requires 0 <= invalid <= total (invalid ' || coalesce((invalid)::text, 'NULL') || ', total ' || coalesce((total)::text, 'NULL') || ')', ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN invalid * t.log_fail + (total - invalid) * t.log_pass;
END $$;

-- fn.sprt_steps(failures, passes, p0, p1, threshold [, chain_version]): the invalidation SPRT as the chain runs it
-- when each status update carries several results (a devshard settlement adds an escrow's invalidations and
-- validations to CurrentEpochStats at once; ComputeStatus then does one UpdateCounts and one Decision). Step k
-- adds failures[k]*log_fail + passes[k]*log_pass, then checks LLR >= threshold. fn.sprt_trajectory is this with one
-- result per step. Same outputs (crossed_at = the 1-based step); NULL element = error.
CREATE OR REPLACE FUNCTION fn.sprt_steps(failures bigint[], passes bigint[], p0 numeric, p1 numeric,
                                         threshold numeric, chain_version text DEFAULT NULL,
                                         OUT max_llr numeric, OUT crossed boolean, OUT crossed_at int,
                                         OUT final_llr numeric, OUT chain_llr numeric)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  t record;
  llr numeric := 0;
  k int;
BEGIN
  SELECT * INTO t FROM fn.sprt_log_terms(p0, p1, chain_version);
  IF failures IS NULL OR passes IS NULL OR threshold IS NULL OR t.log_fail IS NULL THEN
    RETURN;
  END IF;
  IF cardinality(failures) <> cardinality(passes) THEN
    RAISE EXCEPTION USING MESSAGE = 'sprt_steps: ' || cardinality(failures) || ' failure counts but '
      || cardinality(passes) || ' pass counts', ERRCODE = 'invalid_parameter_value';
  END IF;
  crossed := false;
  FOR k IN 1 .. coalesce(cardinality(failures), 0) LOOP
    IF failures[k] IS NULL OR passes[k] IS NULL OR failures[k] < 0 OR passes[k] < 0 THEN
      RAISE EXCEPTION USING MESSAGE = 'sprt_steps: step ' || k || ' has no valid counts', ERRCODE = 'invalid_parameter_value';
    END IF;
    llr := llr + failures[k] * t.log_fail + passes[k] * t.log_pass;
    max_llr := greatest(max_llr, llr);
    IF NOT crossed AND llr >= threshold THEN
      crossed := true;
      crossed_at := k;
      chain_llr := llr;
    END IF;
  END LOOP;
  final_llr := llr;
  IF NOT crossed THEN
    chain_llr := llr;
  END IF;
END $$;


-- fn.sprt_trajectory(outcomes, p0, p1, threshold [, chain_version]): the chain's sequential test over one epoch's
-- results in arrival order (true = invalidated, false = validated). The LLR starts at 0 and gains log_fail or
-- log_pass per result; the host crosses at the first result where LLR >= threshold (the chain then marks it
-- INVALID and stops updating its LLR). Returns
--   max_llr    the largest LLR after any result (NULL for no results),
--   crossed    whether the LLR ever reached the threshold,
--   crossed_at the 1-based position of the result that crossed (NULL if none),
--   final_llr  the LLR after all results as if never stopped (= fn.sprt_llr over the counts),
--   chain_llr  the LLR the chain stores: frozen at the crossing value, else final_llr.
-- A NULL outcome is an error (its order is unknown). Several results applied in one block are summed before
-- the check by the chain; pass them as separate elements only if each was its own status update.
CREATE OR REPLACE FUNCTION fn.sprt_trajectory(outcomes boolean[], p0 numeric, p1 numeric, threshold numeric,
                                              chain_version text DEFAULT NULL,
                                              OUT max_llr numeric, OUT crossed boolean, OUT crossed_at int,
                                              OUT final_llr numeric, OUT chain_llr numeric)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF outcomes IS NULL THEN
    RETURN;
  END IF;
  IF array_position(outcomes, NULL) IS NOT NULL THEN
    RAISE EXCEPTION USING MESSAGE = 'sprt_trajectory: outcome ' || array_position(outcomes, NULL) || ' is NULL',
      ERRCODE = 'null_value_not_allowed';
  END IF;
  -- one result per status update: a step of one failure or one pass
  SELECT s.max_llr, s.crossed, s.crossed_at, s.final_llr, s.chain_llr
    INTO max_llr, crossed, crossed_at, final_llr, chain_llr
  FROM fn.sprt_steps(ARRAY(SELECT o::int::bigint FROM unnest(outcomes) WITH ORDINALITY u(o, i) ORDER BY i),
                     ARRAY(SELECT (NOT o)::int::bigint FROM unnest(outcomes) WITH ORDINALITY u(o, i) ORDER BY i),
                     p0, p1, threshold, chain_version) s;
END $$;

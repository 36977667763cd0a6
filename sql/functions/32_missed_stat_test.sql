-- The chain's downtime test, calculations.MissedStatTest(nMissed, nTotal, p0) of gonka-ai/gonka
-- inference-chain/x/inference/calculations/stats.go (+ stats_table.go), per chain version (docs/chain-math.md):
--   v0.2.0, v0.2.1 : no MissedStatTest (calling for them is an error)
--   v0.2.2..v0.2.5 : one table for p0 = 0.10 (the p0 argument is ignored, as the chain had none)
--   v0.2.6..      : per-p0 tables picked by floor(p0 * 1000) in {50,100,200,300,400,500}; any other p0 runs
--                   the exact one-sided binomial test with shopspring decimals (fn.missed_binomial_p_value)

-- Table lookup, MissedStatTestLookupWithP0 / the legacy MissedStatTest. n > 990: the chain's ratio rule in Go
-- int64 arithmetic (which wraps; reproduced for completeness, unreachable with real counts).
CREATE OR REPLACE FUNCTION fn.missed_stat_lookup(missed bigint, total bigint, family text, p0_permille int)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  t record;
  idx int;
  num int;
  den int;
BEGIN
  IF total > 990 THEN
    IF family = 'legacy' THEN
      RETURN fn.go_int64_wrap(missed::numeric * 10) <= total;
    END IF;
    SELECT m[1], m[2] INTO num, den FROM (VALUES
      (50, ARRAY[1, 20]), (100, ARRAY[1, 10]), (200, ARRAY[1, 5]),
      (300, ARRAY[3, 10]), (400, ARRAY[2, 5]), (500, ARRAY[1, 2])) AS pm(permille, m)
    WHERE pm.permille = p0_permille;
    RETURN fn.go_int64_wrap(missed::numeric * den) <= fn.go_int64_wrap(total::numeric * num);
  END IF;
  SELECT * INTO t FROM fn.missed_stat_critical_tables() c
  WHERE c.family = missed_stat_lookup.family AND c.p0_permille = missed_stat_lookup.p0_permille;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'unsupported p0 value' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- sort.Search: the last row whose total is <= n; none (n below the first row) passes.
  SELECT max(i) INTO idx FROM generate_subscripts(t.totals, 1) i WHERE t.totals[i] <= total;
  IF idx IS NULL THEN
    RETURN true;
  END IF;
  RETURN missed <= t.critical[idx];
END $$;

-- BinomialPValue(k, n, p0, prec) of stats.go (v0.2.6 on): P(X >= k), X ~ Binomial(n, p0), in shopspring
-- decimals: every Div rounds half away from zero at 16 places, pow() rounds its result at prec (except
-- exponent 1), Mul is exact, the sum is rounded at prec. Exact products grow by 32 digits per term; past
-- guard_scale places they are rounded (half away) at guard_scale, so the result is the chain's unless the
-- exact sum lies within n * 10^-guard_scale of a rounding boundary at 16 places (documented).
CREATE OR REPLACE FUNCTION fn.missed_binomial_p_value(k bigint, n bigint, p0 numeric, prec int DEFAULT 16,
                                                      guard_scale int DEFAULT 400)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  q0 numeric;
  ratio numeric;
  coeff numeric := 1;
  prob numeric;
  total_p numeric;
  i bigint;
BEGIN
  IF k < 0 OR n < 0 OR k > n THEN
    RAISE EXCEPTION 'invalid input: requires 0 <= k <= n' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p0 <= 0 OR p0 >= 1 THEN
    RAISE EXCEPTION 'p0 must be in (0, 1)' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF k = 0 THEN
    RETURN 1;
  END IF;
  q0 := 1 - p0;
  -- binomialPMF(k, n, p0, q0, prec)
  IF k = n THEN
    prob := fn.go_pow_round(p0, n, prec);
  ELSE
    FOR i IN 0 .. k - 1 LOOP
      coeff := fn.go_div_round(coeff * (n - i), i + 1, 16);
    END LOOP;
    prob := coeff * fn.go_pow_round(p0, k, prec) * fn.go_pow_round(q0, n - k, prec);
  END IF;
  total_p := prob;
  ratio := fn.go_div_round(p0, q0, 16);
  i := k;
  WHILE i < n LOOP
    prob := prob * fn.go_div_round(n - i, i + 1, 16) * ratio;
    IF scale(prob) > guard_scale THEN
      prob := round(prob, guard_scale);
    END IF;
    total_p := total_p + prob;
    i := i + 1;
  END LOOP;
  RETURN round(total_p, prec);
END $$;

-- stats.go pow(base, exp, prec): 1 for exp 0, base itself for exp 1, else the exact power rounded at prec.
-- Exact powers of a short decimal stay small enough here; a long one is squared at a guard precision.
CREATE OR REPLACE FUNCTION fn.go_pow_round(base numeric, e bigint, prec int)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  result numeric := 1;
  b numeric := base;
  k bigint := e;
BEGIN
  IF e = 0 THEN RETURN 1; END IF;
  IF e = 1 THEN RETURN base; END IF;
  IF scale(base)::numeric * e <= 8000 THEN
    RETURN round(fn.pow_exact(base, e), prec);
  END IF;
  WHILE k > 0 LOOP
    IF k & 1 = 1 THEN result := round(result * b, 400); END IF;
    k := k >> 1;
    IF k > 0 THEN b := round(b * b, 400); END IF;
  END LOOP;
  RETURN round(result, prec);
END $$;

-- fn.missed_stat_test(missed, total, p0 [, chain_version]): true = the host passes the downtime test.
-- total = 0 passes before any check (as in the chain); negative counts or missed > total are the chain's
-- "invalid input" error; an off-table p0 outside (0, 1) is the chain's "p0 must be in (0, 1)" error.
CREATE OR REPLACE FUNCTION fn.missed_stat_test(missed bigint, total bigint, p0 numeric,
                                               chain_version text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v int := fn.chain_version_ordinal(chain_version);
  permille numeric;
BEGIN
  IF v < 3 THEN
    RAISE EXCEPTION USING MESSAGE = 'chain version ' || coalesce((chain_version)::text, 'NULL') || ' has no MissedStatTest (it first appears in v0.2.2)', ERRCODE = 'invalid_parameter_value';
  END IF;
  IF missed IS NULL OR total IS NULL THEN
    RETURN NULL;
  END IF;
  IF total = 0 THEN
    RETURN true;
  END IF;
  IF missed < 0 OR total < 0 OR missed > total THEN
    RAISE EXCEPTION USING MESSAGE = 'invalid input: requires 0 <= nMissed <= nTotal and nTotal > 0 (missed ' || coalesce((missed)::text, 'NULL') || ', total ' || coalesce((total)::text, 'NULL') || ')', ERRCODE = 'invalid_parameter_value';
  END IF;
  IF v <= 6 THEN                                   -- v0.2.2 .. v0.2.5: p0 fixed at 0.10
    RETURN fn.missed_stat_lookup(missed, total, 'legacy', 100);
  END IF;
  IF p0 IS NULL THEN
    RETURN NULL;
  END IF;
  permille := trunc(p0 * 1000);                    -- decimalToPermille: IntPart, toward zero
  IF permille IN (50, 100, 200, 300, 400, 500) THEN
    RETURN fn.missed_stat_lookup(missed, total, CASE WHEN v >= 11 THEN 'v0.2.10' ELSE 'v0.2.6' END, permille::int);
  END IF;
  RETURN fn.missed_binomial_p_value(missed, total, p0) >= 0.05;   -- alpha = NewFromFloat(0.05)
END $$;

-- getDynamicP0 of keeper/bitcoin_rewards.go (v0.2.10 on): the p0 the settlement passes to MissedStatTest and
-- whether it skips downtime punishment (the outage circuit breaker). Inputs are the epoch-wide sums over
-- participants with InferenceCount + MissedRequests > 0: total_requests = sum(InferenceCount + MissedRequests),
-- missed_requests = sum(MissedRequests), participants_used = how many such participants; binom_test_p0 is the
-- governance ValidationParams.binom_test_p0 (NULL = unset). Before v0.2.10 the chain passes binom_test_p0
-- itself (0.10 when unset) and never skips: this function returns that for those versions.
CREATE OR REPLACE FUNCTION fn.downtime_p0(total_requests numeric, missed_requests numeric, participants_used int,
                                          binom_test_p0 numeric, chain_version text DEFAULT NULL,
                                          OUT p0 numeric, OUT skip_punishment boolean)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v int := fn.chain_version_ordinal(chain_version);
  gov_permille numeric := 100;
  gov_ceil numeric;
  target numeric;
  selected numeric;
BEGIN
  skip_punishment := false;
  IF v < 11 THEN
    p0 := coalesce(binom_test_p0, 0.10);
    RETURN;
  END IF;
  IF binom_test_p0 IS NOT NULL THEN
    gov_ceil := trunc(binom_test_p0 * 1000);       -- decimalToPermilleCeil
    IF gov_ceil <= 0 THEN
      gov_ceil := 0;
    ELSIF binom_test_p0 > gov_ceil / 1000 THEN
      gov_ceil := gov_ceil + 1;
    END IF;
    IF gov_ceil > 500 THEN
      p0 := binom_test_p0;
      RETURN;
    END IF;
    IF gov_ceil > 0 THEN
      gov_permille := fn.ceil_supported_p0_permille(gov_ceil);
    END IF;
  END IF;
  IF total_requests IS NULL OR missed_requests IS NULL OR participants_used IS NULL THEN
    skip_punishment := NULL;                      -- unknown epoch sums: unknown p0, never a guessed skip
    RETURN;
  END IF;
  IF total_requests < 1000 OR participants_used < 5 THEN   -- dynamicP0MinTotalRequests / MinParticipantsWithTotal
    p0 := round(gov_permille / 1000, 3);
    RETURN;
  END IF;
  target := least(div(missed_requests * 1000, total_requests) + 20, 500);   -- + dynamicP0MarginPermille
  selected := fn.ceil_supported_p0_permille(target);
  p0 := round(greatest(selected, gov_permille) / 1000, 3);
  skip_punishment := selected = 500;
END $$;

CREATE OR REPLACE FUNCTION fn.ceil_supported_p0_permille(permille numeric)
RETURNS int LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT CASE WHEN permille <= 50 THEN 50 WHEN permille <= 100 THEN 100 WHEN permille <= 200 THEN 200
              WHEN permille <= 300 THEN 300 WHEN permille <= 400 THEN 400 ELSE 500 END
$$;

-- fn.downtime_check(missed_requests, inference_count, p0 [, chain_version]): the host's downtime verdict as the
-- settlement applies it, CheckAndPunishForDowntime(total, missed, reward, p0) of gonka-ai/gonka
-- inference-chain/x/inference/keeper/accountsettle.go (read in the stored revision with loadBitcoinRewardInputs
-- and in an earlier one with the same body): total = InferenceCount + MissedRequests in uint64 (wraps at
-- 2^64), total = 0 keeps the reward, then MissedStatTest(int(missed), int(total), p0), where Go's int() reads a
-- uint64 of 2^63 or more as negative; a MissedStatTest error ("invalid input ...", "p0 must be in (0, 1)") KEEPS the
-- reward. So passes = true with chain_error naming the error the chain swallowed. The counts are the chain's uint64
-- counters: a negative or non-integer count, or one past 2^64 - 1, is not one and raises. NULL count or p0: unknown.
CREATE OR REPLACE FUNCTION fn.downtime_check(missed_requests numeric, inference_count numeric, p0 numeric,
                                             chain_version text DEFAULT NULL,
                                             OUT passes boolean, OUT chain_error text)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  total numeric;
  go_missed numeric;
  go_total numeric;
BEGIN
  -- an unknown version, or one without the test, is the caller's error, never a swallowed chain error
  IF fn.chain_version_ordinal(chain_version) < 3 THEN
    RAISE EXCEPTION USING MESSAGE = 'chain version ' || chain_version || ' has no MissedStatTest (it first appears '
      || 'in v0.2.2)', ERRCODE = 'invalid_parameter_value';
  END IF;
  IF missed_requests IS NULL OR inference_count IS NULL THEN
    RETURN;
  END IF;
  IF missed_requests < 0 OR inference_count < 0 OR missed_requests <> trunc(missed_requests)
     OR inference_count <> trunc(inference_count)
     OR greatest(missed_requests, inference_count) > 18446744073709551615 THEN
    RAISE EXCEPTION USING MESSAGE = 'downtime_check: counts must be uint64 (missed_requests ' || missed_requests
      || ', inference_count ' || inference_count || ')', ERRCODE = 'invalid_parameter_value';
  END IF;
  total := mod(inference_count + missed_requests, 18446744073709551616);   -- uint64 addition wraps
  IF total = 0 THEN
    passes := true;
    RETURN;
  END IF;
  go_total := fn.go_int64_wrap(total);                                      -- int(total)
  go_missed := fn.go_int64_wrap(missed_requests);                           -- int(missed)
  IF go_missed < 0 OR go_total < 0 OR go_missed > go_total THEN
    passes := true;
    chain_error := 'invalid input: requires 0 <= nMissed <= nTotal and nTotal > 0 (Go int: missed ' || go_missed
                   || ', total ' || go_total || '); the chain keeps the reward';
    RETURN;
  END IF;
  BEGIN
    passes := fn.missed_stat_test(go_missed::bigint, go_total::bigint, p0, chain_version);
  EXCEPTION WHEN invalid_parameter_value THEN
    passes := true;
    chain_error := SQLERRM || '; the chain keeps the reward';
  END;
END $$;

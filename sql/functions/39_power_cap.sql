-- The power cap the chain applies to the reward weights of an epoch's ACTIVE hosts (docs/chain-math.md "Power cap").
--
-- CalculateParticipantBitcoinRewardsWithTransfers (gonka-ai/gonka inference-chain/x/inference/keeper/
-- bitcoin_rewards.go) builds one list of effective weights (fn.reward_weight) of the participants with a
-- validation weight > 0 AND status ACTIVE, caps it with ApplyPowerCappingForWeights, and only then zeroes the hosts
-- the downtime test fails and applies delegation; the denominator stays the sum of full weights. So a host that
-- fails downtime is still in the list, an excluded (INVALID) host is not, and a capped host's share goes to
-- governance (nothing is redistributed).
--
-- ApplyPowerCappingForWeights / CalculateOptimalCap, in the two stored revisions read:
--   * counted: the headcount of the list (every entry, zero weights included) in the stored revision that still
--     has RecomputeEffectiveWeightFromMLNodes (before v0.2.12), and in the code issue #1395 (2026-07-04, "power
--     cap zeros network when zero-weight participants are in settlement") describes, so in v0.2.12 and v0.2.13
--     (released 2026-04-29 and 2026-05-26) too; the newest stored revision (with delegation transfers) counts only
--     the positive weights, returns "no cap" for one positive weight or fewer, and ignores a cap <= 0 (the #1395
--     fix). Which of v0.2.14 .. v0.2.18 first carries that fix is not established: fn.power_cap gives a figure for
--     them only where both rules agree (every list without a zero weight), and an error otherwise.
--   * limit: 0.30, raised to 0.50 for a count of 2 and 0.40 for 3 (getSmallNetworkLimit); types.DecimalFromFloat
--     is decimal.NewFromFloat, the shortest decimal of the double, so exactly 0.3, 0.5 and 0.4.
--   * sort ascending; for k = 0 .. n-1: weightedTotal = sumPrev + w_k * (n - k); the first w_k > limit x
--     weightedTotal gives cap = IntPart(Div(limit x sumPrev, 1 - limit x (n - k))), or cap = w_k when that
--     denominator is <= 0; no such k: no cap. Every weight above cap becomes cap.
-- Decimal Mul and Sub are exact; Div is DivRound at 16 places, half away from zero (fn.go_div_round); IntPart
-- truncates toward zero. With the chain's limits the quotient is 3s/7, 3s/4, 3s, 2s/3, 2s or s for an integer s,
-- never within 10^-16 below an integer, so the rounding cannot change the cap there; fn.power_cap_optimal keeps it
-- for any limit. Go's int64 products and sums are checked: past int64 the function raises instead of wrapping.

-- CalculateOptimalCap(weights, limit): capped = false when no cap applies; positive_only: the newest revision
-- (only weights > 0 take part, a cap <= 0 is ignored), else the headcount revision (every entry takes part).
CREATE OR REPLACE FUNCTION fn.power_cap_optimal(weights bigint[], max_share numeric, positive_only boolean,
                                                OUT capped boolean, OUT cap bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  sorted bigint[];
  n int;
  w bigint;
  sum_prev numeric := 0;
  weighted numeric;
  den numeric;
BEGIN
  IF weights IS NULL OR max_share IS NULL OR positive_only IS NULL THEN
    RETURN;
  END IF;
  IF array_position(weights, NULL) IS NOT NULL THEN
    RAISE EXCEPTION USING MESSAGE = 'power cap: a weight of the list is NULL (unknown)',
                          ERRCODE = 'null_value_not_allowed';
  END IF;
  SELECT array_agg(x ORDER BY x) INTO sorted FROM unnest(weights) x WHERE NOT positive_only OR x > 0;
  n := COALESCE(cardinality(sorted), 0);
  capped := false;
  IF positive_only AND n <= 1 THEN
    RETURN;
  END IF;
  FOR k IN 0 .. n - 1 LOOP
    w := sorted[k + 1];
    weighted := sum_prev + w::numeric * (n - k);
    IF weighted NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
      RAISE EXCEPTION USING MESSAGE = 'power cap: sumPrev + w x (n - k) = ' || weighted || ' is past int64',
                            ERRCODE = 'numeric_value_out_of_range';
    END IF;
    IF w > max_share * weighted THEN
      den := 1 - max_share * (n - k);
      IF den <= 0 THEN
        cap := w;
      ELSE
        cap := trunc(fn.go_div_round(max_share * sum_prev, den, 16));
      END IF;
      capped := true;
      EXIT;
    END IF;
    sum_prev := sum_prev + w;
  END LOOP;
  IF capped AND positive_only AND cap <= 0 THEN
    capped := false;
    cap := NULL;
  END IF;
END $$;
COMMENT ON FUNCTION fn.power_cap_optimal(bigint[], numeric, boolean) IS
  'CalculateOptimalCap of keeper/bitcoin_rewards.go: the cap on a list of weights at a given limit, exactly '
  '(shopspring Div at 16 places, IntPart); positive_only = the revision that ignores weights <= 0 (docs/chain-math.md)';

-- ApplyPowerCappingForWeights of one revision: the count (headcount or positive weights) picks the limit.
CREATE OR REPLACE FUNCTION fn.power_cap_apply(weights bigint[], positive_only boolean,
                                              OUT capped boolean, OUT cap bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  n int;
BEGIN
  IF weights IS NULL OR positive_only IS NULL THEN
    RETURN;
  END IF;
  n := CASE WHEN positive_only THEN (SELECT count(*) FROM unnest(weights) x WHERE x > 0)
            ELSE cardinality(weights) END;
  IF n <= 1 THEN
    capped := false;
    RETURN;
  END IF;
  SELECT o.capped, o.cap INTO capped, cap
  FROM fn.power_cap_optimal(weights, CASE n WHEN 2 THEN 0.50 WHEN 3 THEN 0.40 ELSE 0.30 END, positive_only) o;
END $$;
COMMENT ON FUNCTION fn.power_cap_apply(bigint[], boolean) IS
  'ApplyPowerCappingForWeights of keeper/bitcoin_rewards.go: limit 0.50 for 2 weights, 0.40 for 3, else 0.30, then '
  'fn.power_cap_optimal; positive_only = the revision that counts only weights > 0';

-- The cap the given chain version sets on the list of effective weights of an epoch's ACTIVE hosts. capped = false:
-- no cap; error (capped and cap NULL): the version's rule is not established for this list, or an input is unknown.
-- rule: 'headcount' (v0.2.12, v0.2.13) or 'headcount = positive' (v0.2.14 on, where both revisions agree).
CREATE OR REPLACE FUNCTION fn.power_cap(weights bigint[], chain_version text DEFAULT NULL,
                                        OUT capped boolean, OUT cap bigint, OUT rule text, OUT error text)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v int;
  h record;
  p record;
BEGIN
  BEGIN
    v := fn.chain_version_ordinal(chain_version);
  EXCEPTION WHEN OTHERS THEN
    error := SQLERRM;
    RETURN;
  END;
  IF weights IS NULL OR array_position(weights, NULL) IS NOT NULL THEN
    error := 'the effective weight of an ACTIVE host of the epoch is unknown';
    RETURN;
  END IF;
  IF v < fn.chain_version_ordinal('v0.2.12') THEN
    error := 'the power cap on reward weights of chain ' || chain_version || ' is not reproduced (v0.2.12 and '
             || 'later are)';
    RETURN;
  END IF;
  BEGIN
    SELECT a.capped, a.cap INTO h FROM fn.power_cap_apply(weights, false) a;
    SELECT a.capped, a.cap INTO p FROM fn.power_cap_apply(weights, true) a;
  EXCEPTION WHEN OTHERS THEN
    error := SQLERRM;
    RETURN;
  END;
  IF v <= fn.chain_version_ordinal('v0.2.13') THEN
    capped := h.capped; cap := h.cap; rule := 'headcount';
    RETURN;
  END IF;
  IF h.capped IS NOT DISTINCT FROM p.capped AND h.cap IS NOT DISTINCT FROM p.cap THEN
    capped := h.capped; cap := h.cap; rule := 'headcount = positive';
    RETURN;
  END IF;
  error := 'the power cap of chain ' || COALESCE(chain_version, 'newest') || ' on this list is not established: '
           || 'the list holds a zero weight, and whether this version counts it (cap '
           || CASE WHEN h.capped THEN h.cap::text ELSE 'none' END || ') or only the positive weights (cap '
           || CASE WHEN p.capped THEN p.cap::text ELSE 'none' END || ', the fix of gonka issue #1395) is not known';
END $$;
COMMENT ON FUNCTION fn.power_cap(bigint[], text) IS
  'the power cap (ApplyPowerCappingForWeights) the chain version sets on the effective weights of an epoch''s '
  'ACTIVE hosts: capped = false when none applies; error when the version''s rule for the list is not established '
  '(docs/chain-math.md "Power cap")';

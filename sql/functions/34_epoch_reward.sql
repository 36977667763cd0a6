-- The chain's fixed epoch reward, keeper/bitcoin_rewards.go CalculateFixedEpochReward(epochsSinceGenesis,
-- InitialEpochReward, DecayRate) with epochsSinceGenesis = EpochIndex - GenesisEpoch (uint64), and the reward
-- share of CalculateParticipantBitcoinRewards. Per version (docs/chain-math.md):
--   v0.2.0..v0.2.7 : initial * NewFromFloat(math.Exp(float64(decay * epochs))), truncated (IntPart); math.Exp is
--                    Go's amd64 assembly (the FMA path, as on any validator CPU with AVX+FMA), emulated here
--   v0.2.8 on     : exp(decay) from a fixed table (types.GetExponent), raised to the epochs exactly (PowInt32),
--                    times initial, truncated

-- One float64 fused multiply-add a*b + c with a single rounding (x86 VFMADD/VFNMADD).
CREATE OR REPLACE FUNCTION fn.f64_fma(a float8, b float8, c float8)
RETURNS float8 LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT (fn.f64_exact(a) * fn.f64_exact(b) + fn.f64_exact(c))::float8
$$;

-- Go math.Exp on amd64 (src/math/exp_amd64.s, useFMA path): Shibata's reduction x = k*ln2 + r, r/16,
-- a degree-8 Taylor polynomial, four squarings, times 2^k. Every step is one IEEE double operation, as PostgreSQL
-- float8 arithmetic is; fused steps go through fn.f64_fma. Returns NULL for +Inf (the chain's "complete decay").
CREATE OR REPLACE FUNCTION fn.go_math_exp(x float8)
RETURNS float8 LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  log2e float8 := '1.4426950408889634073599246810018920'::float8;
  ln2u float8 := '0.69314718055966295651160180568695068359375'::float8;
  ln2l float8 := '0.28235290563031577122588448175013436025525412068e-12'::float8;
  c float8[] := ARRAY['0.5', '1.0', '2.0', '1.6666666666666666667e-1', '4.1666666666666666667e-2',
                      '8.3333333333333333333e-3', '1.3888888888888888889e-3', '1.9841269841269841270e-4',
                      '2.4801587301587301587e-5']::float8[];
  k int;
  kf float8;
  x0 float8 := x;
  x1 float8;
BEGIN
  IF x > '7.09782712893384e+02'::float8 THEN
    RETURN NULL;
  END IF;
  kf := round(x * log2e);                          -- CVTSD2SL: round half to even (rint)
  k := kf::int;
  x0 := fn.f64_fma(-kf, ln2u, x0);
  x0 := fn.f64_fma(-kf, ln2l, x0);
  x0 := x0 * 0.0625::float8;
  x1 := c[9];
  x1 := fn.f64_fma(x1, x0, c[8]);
  x1 := fn.f64_fma(x1, x0, c[7]);
  x1 := fn.f64_fma(x1, x0, c[6]);
  x1 := fn.f64_fma(x1, x0, c[5]);
  x1 := fn.f64_fma(x1, x0, c[4]);
  x1 := fn.f64_fma(x1, x0, c[1]);
  x1 := fn.f64_fma(x1, x0, c[2]);
  x0 := x0 * x1;
  x1 := x0 + c[3]; x0 := x0 * x1;
  x1 := x0 + c[3]; x0 := x0 * x1;
  x1 := x0 + c[3]; x0 := x0 * x1;
  x1 := x0 + c[3];
  x0 := fn.f64_fma(x1, x0, c[2]);
  IF k + 1023 <= 0 THEN                            -- denormal result: exact scaling in two steps
    IF k < -1074 THEN RETURN 0; END IF;
    RETURN (fn.f64_exact(x0) * fn.pow_exact(0.5, -k))::float8;
  END IF;
  IF k + 1023 >= 2047 THEN
    RETURN NULL;
  END IF;
  RETURN (fn.f64_exact(x0) * CASE WHEN k >= 0 THEN fn.pow_exact(2, k) ELSE fn.pow_exact(0.5, -k) END)::float8;
END $$;

-- types.GetExponent (types/params.go, v0.2.8 on): the only decay rates the chain accepts, with exp(decay) fixed.
CREATE OR REPLACE FUNCTION fn.decay_exponent(decay_rate numeric)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  RETURN CASE decay_rate
    WHEN -0.000475 THEN 0.9995251127946402
    WHEN -0.000001 THEN 0.9999990000005
    WHEN 0.0001 THEN 1.0001000050001667
    WHEN 0 THEN 1
  END;
END $$;

-- fn.theoretical_epoch_reward(epoch_index, initial_epoch_reward, decay_rate, genesis_epoch [, chain_version]):
-- the epoch's fixed reward in ngonka, as the chain computes it. epochs = epoch_index - genesis_epoch as uint64
-- (GenesisEpoch = 1 on mainnet, so epoch 366 decays 365 times). decay_rate NULL = the chain's nil DecayRate
-- (reward = initial). Errors as the chain's: an unsupported decay rate or epochs >= 2^31-1 (v0.2.8 on; the chain
-- then logs and pays 0), an initial reward that is not a uint64.
CREATE OR REPLACE FUNCTION fn.theoretical_epoch_reward(epoch_index bigint, initial_epoch_reward numeric,
                                                       decay_rate numeric, genesis_epoch bigint,
                                                       chain_version text DEFAULT NULL)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v int := fn.chain_version_ordinal(chain_version);
  epochs numeric;
  base numeric;
  e float8;
  reward numeric;
BEGIN
  IF epoch_index IS NULL OR initial_epoch_reward IS NULL OR genesis_epoch IS NULL THEN
    RETURN NULL;
  END IF;
  IF initial_epoch_reward < 0 OR initial_epoch_reward <> trunc(initial_epoch_reward)
     OR initial_epoch_reward > 18446744073709551615 THEN
    RAISE EXCEPTION USING MESSAGE = 'initial_epoch_reward ' || coalesce((initial_epoch_reward)::text, 'NULL') || ' is not a uint64 ngonka amount', ERRCODE = 'invalid_parameter_value';
  END IF;
  IF initial_epoch_reward = 0 THEN RETURN 0; END IF;
  IF decay_rate IS NULL THEN RETURN initial_epoch_reward; END IF;
  epochs := mod(mod(epoch_index::numeric - genesis_epoch, 18446744073709551616) + 18446744073709551616,
                18446744073709551616);            -- uint64 subtraction wraps
  IF epochs = 0 THEN RETURN initial_epoch_reward; END IF;
  IF v >= 9 THEN
    base := fn.decay_exponent(decay_rate);
    IF base IS NULL THEN
      RAISE EXCEPTION USING MESSAGE = 'unsupported decay rate: ' || coalesce((decay_rate)::text, 'NULL'), ERRCODE = 'invalid_parameter_value';
    END IF;
    IF epochs >= 2147483647 THEN
      RAISE EXCEPTION USING MESSAGE = 'exponent overflow: ' || coalesce((epochs)::text, 'NULL'), ERRCODE = 'numeric_value_out_of_range';
    END IF;
    reward := trunc(initial_epoch_reward * fn.pow_exact(base, epochs::bigint));
    RETURN greatest(reward, 0);
  END IF;
  -- v0.2.0 .. v0.2.7: decimal.NewFromInt(int64(epochs)) reinterprets the uint64; exponent.InexactFloat64() is the
  -- nearest double (numeric -> float8 rounds correctly); NewFromFloat gives the shortest decimal.
  e := fn.go_math_exp((decay_rate * fn.go_int64_wrap(epochs))::float8);
  IF e IS NULL OR e = 'NaN'::float8 THEN RETURN 0; END IF;
  reward := initial_epoch_reward * fn.f64_shortest(e);
  IF reward < 1 THEN RETURN 0; END IF;
  RETURN trunc(reward);
END $$;

-- fn.reward_share(reward, weight, total_weight): a host's share of the epoch reward as
-- CalculateParticipantBitcoinRewards pays it (all versions): big.Int (weight * reward) / total_weight, truncated,
-- capped at max uint64. total_weight is the sum of full (pre-CPoC, pre-downtime) weights; 0 pays nothing. A quotient
-- past uint64 needs a weight above that sum, which the chain never passes; there the revisions part (max uint64 in
-- keeper/bitcoin_rewards.go @577203ba, MaxInt64 in the stored revision with
-- CalculateParticipantBitcoinRewardsWithTransfers), and api.restitution_impact never prices such a weight: its
-- capped figures require the captured weights to sum to total_weight.
CREATE OR REPLACE FUNCTION fn.reward_share(reward numeric, weight bigint, total_weight bigint)
RETURNS numeric LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT CASE WHEN total_weight <= 0 OR weight <= 0 THEN 0
              ELSE least(div(weight * reward, total_weight), 18446744073709551615) END
$$;

-- The Gonka chain (gonka-ai/gonka, inference-chain) versions the fn.* chain-math functions know, oldest first.
-- Every chain-math function takes an optional last argument chain_version ('v0.2.10' or '0.2.10'); NULL or
-- omitted means the newest version listed here. Commits are those of the release/<version> tags (v0.2.12 and
-- v0.2.13 have no release tag in the public history: the squash-merge commits "Upgrade v0.2.12 (#948)" and
-- "v0.2.13: microrelease (#1143)" on main stand for them; v0.2.14 .. v0.2.18 are known by their upgrade handlers).
-- See docs/chain-math.md.
CREATE OR REPLACE FUNCTION fn.chain_versions()
RETURNS TABLE (ordinal int, chain_version text, git_ref text, git_commit text, released date,
               missed_stat_test text, invalidation_sprt text, epoch_reward text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  VALUES
    (1,  'v0.2.0',  'release/v0.2.0',  'f653fa57057b66b590e3d2d2f7f9d577f1514439', date '2025-08-21',
         'none', 'none (z-score rule)', 'float64 math.Exp'),
    (2,  'v0.2.1',  'release/v0.2.1',  '45197028dcc2eaf736f48de4d3b44d7249e6d068', date '2025-08-26',
         'none', 'none (z-score rule)', 'float64 math.Exp'),
    (3,  'v0.2.2',  'release/v0.2.2',  'ef7f0300536d92b4a1bf582dd0d80c40d97220a5', date '2025-09-24',
         'fixed p0=0.10 table', 'none (z-score rule)', 'float64 math.Exp'),
    (4,  'v0.2.3',  'release/v0.2.3',  '1da6250e25d921eaa25ecc19788ed1817801f6df', date '2025-10-02',
         'fixed p0=0.10 table', 'none (z-score rule)', 'float64 math.Exp'),
    (5,  'v0.2.4',  'release/v0.2.4',  '12a09bb24c1f668a23f0e85bbf277e6010603921', date '2025-10-21',
         'fixed p0=0.10 table', 'none (z-score rule)', 'float64 math.Exp'),
    (6,  'v0.2.5',  'release/v0.2.5',  'e25ddb7d462972cce202c8b39448bf3feb8e29a0', date '2025-11-21',
         'fixed p0=0.10 table', 'SPRT, p in (0,1)', 'float64 math.Exp'),
    (7,  'v0.2.6',  'release/v0.2.6',  '384b95025f11cff177fa40ec191f724852f54edb', date '2025-12-16',
         'per-p0 tables + binomial', 'SPRT, p in (0,1)', 'float64 math.Exp'),
    (8,  'v0.2.7',  'release/v0.2.7',  'd18165669326fffd6732bc124183a72c076a69ee', date '2026-01-06',
         'per-p0 tables + binomial', 'SPRT, p in (0,1)', 'float64 math.Exp'),
    (9,  'v0.2.8',  'release/v0.2.8',  'd61cf37eb97e0aaf3e4b227a1d6f31ea8635797a', date '2026-01-27',
         'per-p0 tables + binomial', 'SPRT, p in (0,1)', 'exp(decay) table, exact power'),
    (10, 'v0.2.9',  'release/v0.2.9',  '808247ea17c254f0b81cfa67edb579ba249175f0', date '2026-01-31',
         'per-p0 tables + binomial', 'SPRT, p in (0,1)', 'exp(decay) table, exact power'),
    (11, 'v0.2.10', 'release/v0.2.10', 'faa358dec3091e19cb92267556443775431ecc81', date '2026-02-17',
         'per-p0 tables (p0=0.10 n<=10 relaxed) + binomial', 'SPRT, p in (0,1)', 'exp(decay) table, exact power'),
    (12, 'v0.2.11', 'release/v0.2.11', '54c09b35bdceb4dd91c6d578635e63b8e41797e2', date '2026-03-18',
         'per-p0 tables (p0=0.10 n<=10 relaxed) + binomial', 'SPRT precomputed, p in [0,1]', 'exp(decay) table, exact power'),
    (13, 'v0.2.12', 'main: Upgrade v0.2.12 (#948)', 'd8b8e9073d1a420d344d3ecc33ef23957f4142b1', date '2026-04-29',
         'per-p0 tables (p0=0.10 n<=10 relaxed) + binomial', 'SPRT precomputed, p in [0,1]', 'exp(decay) table, exact power'),
    (14, 'v0.2.13', 'main: v0.2.13: microrelease (#1143)', '17808620293b57112896bcbb7f99c4c2f554d6c8', date '2026-05-26',
         'per-p0 tables (p0=0.10 n<=10 relaxed) + binomial', 'SPRT precomputed, p in [0,1]', 'exp(decay) table, exact power'),
    -- v0.2.14 .. v0.2.18: no release tag read; the upgrade handler's commit stands for each. Their math was compared
    -- with the newest stored sources (docs/chain-math.md "After v0.2.13"): the downtime test, getDynamicP0, the SPRT
    -- terms and the epoch reward formula are v0.2.13's; what changed is who receives the reward (delegation
    -- transfers from v0.2.14), which fn.reward_share does not model in any version.
    (15, 'v0.2.14', 'upgrade handler app/upgrades/v0_2_14', '8ca9be379e5f5cafe551473a47337f79c6a4129c', NULL,
         'as v0.2.13', 'as v0.2.13', 'as v0.2.13'),
    (16, 'v0.2.15', 'upgrade handler app/upgrades/v0_2_15', '7f6cbbb93cd50850938c3829a27f3e43bee70c72', NULL,
         'as v0.2.13', 'as v0.2.13', 'as v0.2.13'),
    (17, 'v0.2.16', 'upgrade handler app/upgrades/v0_2_16', '36fb3ce3a8fa45cd6f6409b9f4ac68d9997224cb', NULL,
         'as v0.2.13', 'as v0.2.13', 'as v0.2.13'),
    (18, 'v0.2.17', 'upgrade handler app/upgrades/v0_2_17', 'ffd9dff006f6911683577d1f4eb467cb8742453b', NULL,
         'as v0.2.13', 'as v0.2.13', 'as v0.2.13'),
    (19, 'v0.2.18', 'upgrade handler app/upgrades/v0_2_18', 'ffd9dff006f6911683577d1f4eb467cb8742453b', NULL,
         'as v0.2.13', 'as v0.2.13', 'as v0.2.13')
$$;
COMMENT ON FUNCTION fn.chain_versions() IS
  'Chain versions the fn.* chain-math functions reproduce, with the git tag/commit each follows (docs/chain-math.md).';

-- Ordinal of a chain version (NULL = newest); an unknown version is an error, never a silent default.
CREATE OR REPLACE FUNCTION fn.chain_version_ordinal(chain_version text DEFAULT NULL)
RETURNS int LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  wanted text := CASE WHEN chain_version IS NULL THEN NULL
                      WHEN left(btrim(chain_version), 1) = 'v' THEN btrim(chain_version)
                      ELSE 'v' || btrim(chain_version) END;
  found int;
BEGIN
  IF wanted IS NULL THEN
    SELECT max(v.ordinal) INTO found FROM fn.chain_versions() v;
    RETURN found;
  END IF;
  SELECT v.ordinal INTO found FROM fn.chain_versions() v WHERE v.chain_version = wanted;
  IF found IS NULL THEN
    RAISE EXCEPTION USING MESSAGE = 'unknown chain version ' || coalesce((chain_version)::text, 'NULL') || ': known versions are listed by fn.chain_versions()', ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN found;
END $$;

-- ---------------------------------------------------------------------------------------------------------------
-- Go arithmetic the chain math relies on, reproduced exactly (shared by 31_…, 32_…, 33_…).

-- 10^k exactly, for any integer k (a numeric literal is exact; power() with a negative exponent is not).
CREATE OR REPLACE FUNCTION fn.ten_pow(k int)
RETURNS numeric LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT ('1e' || k)::numeric
$$;

-- base^e for e >= 0 by exact squaring (numeric multiplication is exact; what shopspring Mul and PowInt32 do).
CREATE OR REPLACE FUNCTION fn.pow_exact(base numeric, e bigint)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  result numeric := 1;
  b numeric := base;
  k bigint := e;
BEGIN
  IF k < 0 THEN
    RAISE EXCEPTION USING MESSAGE = 'pow_exact: negative exponent ' || coalesce((e)::text, 'NULL'), ERRCODE = 'invalid_parameter_value';
  END IF;
  WHILE k > 0 LOOP
    IF k & 1 = 1 THEN result := result * b; END IF;
    k := k >> 1;
    IF k > 0 THEN b := b * b; END IF;
  END LOOP;
  RETURN result;
END $$;

-- shopspring/decimal v1.4.0 DivRound(a, b, prec): the exact quotient rounded to prec places, half away from zero.
-- (Decimal.Div is DivRound with DivisionPrecision = 16, which the chain never changes.) PostgreSQL's "/" rounds
-- at a scale of its own choosing, so the quotient is built from the exact integer division instead.
CREATE OR REPLACE FUNCTION fn.go_div_round(a numeric, b numeric, prec int)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  num numeric := a * fn.ten_pow(prec);
  q numeric;
  r numeric;
BEGIN
  IF b = 0 THEN
    RAISE EXCEPTION 'decimal division by 0' USING ERRCODE = 'division_by_zero';
  END IF;
  q := div(num, b);                      -- truncated toward zero, exact
  r := num - q * b;
  IF 2 * abs(r) >= abs(b) THEN
    q := q + sign(a) * sign(b);
  END IF;
  RETURN round(q * fn.ten_pow(-prec), greatest(prec, 0));
END $$;

-- Go's int64 arithmetic wraps modulo 2^64 (two's complement); used where the chain multiplies counts.
CREATE OR REPLACE FUNCTION fn.go_int64_wrap(x numeric)
RETURNS numeric LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT CASE WHEN m >= 9223372036854775808 THEN m - 18446744073709551616 ELSE m END
  FROM (SELECT mod(mod(x, 18446744073709551616) + 18446744073709551616, 18446744073709551616) AS m) s
$$;

-- The exact value of a float64 as numeric (PostgreSQL's float8 -> numeric cast keeps only 15 digits).
CREATE OR REPLACE FUNCTION fn.f64_exact(x float8)
RETURNS numeric LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  bits bigint := ('x' || encode(float8send(x), 'hex'))::bit(64)::bigint;
  neg boolean := bits < 0;
  biased int := ((bits >> 52) & 2047)::int;
  mant numeric := (bits & 4503599627370495)::numeric;   -- 52 fraction bits
  val numeric;
BEGIN
  IF biased = 2047 THEN
    RAISE EXCEPTION USING MESSAGE = 'float64 ' || coalesce((x)::text, 'NULL') || ' has no exact decimal value', ERRCODE = 'numeric_value_out_of_range';
  END IF;
  IF biased = 0 THEN
    biased := 1;                         -- subnormal: no implicit leading bit
  ELSE
    mant := mant + 4503599627370496;
  END IF;
  IF biased >= 1075 THEN
    val := mant * fn.pow_exact(2, biased - 1075);
  ELSE                                   -- m / 2^k = m * 5^k / 10^k, exactly
    val := mant * fn.pow_exact(5, 1075 - biased) * fn.ten_pow(biased - 1075);
  END IF;
  RETURN CASE WHEN neg THEN -val ELSE val END;
END $$;

-- shopspring decimal.NewFromFloat(x): the shortest decimal that reads back as the same float64 (what Go's
-- strconv 'g'/-1 formatting gives). PostgreSQL prints that same shortest form when extra_float_digits > 0.
CREATE OR REPLACE FUNCTION fn.f64_shortest(x float8)
RETURNS numeric LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET extra_float_digits = 1 AS $$
  SELECT x::text::numeric
$$;

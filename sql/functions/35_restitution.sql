-- Restitution support (docs/restitution.md): the chain version in force at an epoch, the invalidation SPRT over
-- status updates that each carry several results, and error-catching wrappers so that one host's impossible
-- input gives a NULL outcome with a reason instead of failing the whole api view.

-- fn.chain_version_at(epoch_index): the chain version in force for an epoch.
--   1. the newest chain.version_override covering the epoch (version_source 'override'), else
--   2. the last upgrade at or before the epoch's evaluation height (its end_height, else its start_height, from
--      rec.epoch), whether the chain math knows its version or not, when no later version (a chain.upgrade row, or
--      a version of fn.chain_versions()) lacks a height ('upgrade_heights'); a version the math does not know then
--      makes every chain-math function report it (an unknown version is an error), never a silent stand-in; else
--   3. NULL = the newest version the chain math knows ('assumed_newest'), with lower_bound the version the known
--      heights establish (an upgrade of unknown height may or may not precede the epoch).
-- Versions are ordered by their numbers (fn.version_key: v0.2.9 < v0.2.13), upgrades by height.
-- changed_in_epoch: an upgrade of known height falls inside the epoch (its tests ran under two versions).
-- SECURITY DEFINER: the reader role may execute fn.* but not read schema chain or rec.
CREATE OR REPLACE FUNCTION fn.version_key(version text)
RETURNS int[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT array_agg(m[1]::int ORDER BY n) FROM regexp_matches(version, '([0-9]{1,9})', 'g') WITH ORDINALITY t(m, n)
$$;

CREATE OR REPLACE FUNCTION fn.chain_version_at(epoch bigint,
                                               OUT chain_version text, OUT version_source text,
                                               OUT lower_bound text, OUT changed_in_epoch boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  h bigint;
  h_start bigint;
BEGIN
  SELECT o.chain_version INTO chain_version FROM chain.version_override o
  WHERE o.first_epoch <= epoch AND (o.last_epoch IS NULL OR o.last_epoch >= epoch)
  ORDER BY o.set_at DESC, o.override_id DESC LIMIT 1;
  SELECT e.start_height, COALESCE(NULLIF(e.end_height, 0), e.start_height) INTO h_start, h
  FROM rec.epoch e WHERE e.epoch_index = epoch;
  changed_in_epoch := EXISTS (SELECT 1 FROM chain.upgrade u WHERE u.height > h_start AND u.height <= h);
  IF chain_version IS NOT NULL THEN
    version_source := 'override';
    RETURN;
  END IF;
  IF h IS NULL THEN
    version_source := 'assumed_newest';
    RETURN;
  END IF;
  SELECT u.chain_version INTO lower_bound FROM chain.upgrade u
  WHERE u.height <= h ORDER BY u.height DESC, fn.version_key(u.chain_version) DESC LIMIT 1;
  IF lower_bound IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM (SELECT u.chain_version FROM chain.upgrade u WHERE u.height IS NULL
                      UNION
                      SELECT v.chain_version FROM fn.chain_versions() v
                      WHERE NOT EXISTS (SELECT 1 FROM chain.upgrade u WHERE u.chain_version = v.chain_version
                                                                       AND u.height IS NOT NULL)) later
       WHERE fn.version_key(later.chain_version) > fn.version_key(lower_bound)) THEN
    chain_version := lower_bound;
    version_source := 'upgrade_heights';
    RETURN;
  END IF;
  version_source := 'assumed_newest';
END $$;

-- The same, never raising: error = the chain's (or the input's) error message, outcome columns NULL.
CREATE OR REPLACE FUNCTION fn.sprt_steps_safe(failures bigint[], passes bigint[], p0 numeric, p1 numeric,
                                              threshold numeric, chain_version text DEFAULT NULL,
                                              OUT max_llr numeric, OUT crossed boolean, OUT crossed_at int,
                                              OUT final_llr numeric, OUT error text)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  SELECT s.max_llr, s.crossed, s.crossed_at, s.final_llr INTO max_llr, crossed, crossed_at, final_llr
  FROM fn.sprt_steps(failures, passes, p0, p1, threshold, chain_version) s;
EXCEPTION WHEN OTHERS THEN
  error := SQLERRM;
END $$;

-- The downtime test as the settlement applies it (docs/chain-math.md §1): the epoch's p0 (fn.downtime_p0 from the
-- epoch-wide sums; skip_punishment passes everyone), then fn.downtime_check on the host's uint64 counters (a
-- MissedStatTest error keeps the reward: passes, with chain_error). Never raises: error = why the outcome is unknown.
CREATE OR REPLACE FUNCTION fn.downtime_outcome(missed_requests numeric, inference_count numeric,
                                               epoch_total numeric, epoch_missed numeric, epoch_participants int,
                                               binom_test_p0 numeric, chain_version text DEFAULT NULL,
                                               OUT passes boolean, OUT p0 numeric, OUT skipped boolean,
                                               OUT chain_error text, OUT error text)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF missed_requests IS NULL OR inference_count IS NULL THEN
    RETURN;
  END IF;
  SELECT d.p0, d.skip_punishment INTO p0, skipped
  FROM fn.downtime_p0(epoch_total, epoch_missed, epoch_participants, binom_test_p0, chain_version) d;
  IF skipped THEN
    passes := true;
    RETURN;
  END IF;
  SELECT c.passes, c.chain_error INTO passes, chain_error
  FROM fn.downtime_check(missed_requests, inference_count, p0, chain_version) c;
EXCEPTION WHEN OTHERS THEN
  passes := NULL;
  chain_error := NULL;
  error := SQLERRM;
END $$;

-- The same from (missed, total = inference_count + missed) counts that fit bigint.
CREATE OR REPLACE FUNCTION fn.downtime_outcome_safe(missed bigint, total bigint, epoch_total numeric,
                                                    epoch_missed numeric, epoch_participants int,
                                                    binom_test_p0 numeric, chain_version text DEFAULT NULL,
                                                    OUT passes boolean, OUT p0 numeric, OUT skipped boolean,
                                                    OUT error text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT o.passes, o.p0, o.skipped, o.error
  FROM fn.downtime_outcome(missed, total::numeric - missed, epoch_total, epoch_missed, epoch_participants,
                           binom_test_p0, chain_version) o
$$;

-- fn.theoretical_epoch_reward over an epoch's bitcoin_reward_params object as captured; never raises. Where the
-- chain's CalculateFixedEpochReward returns an error (v0.2.8 on: a decay rate GetExponent does not know, or
-- epochs since genesis >= 2^31 - 1, e.g. a genesis epoch after the epoch), CalculateParticipantBitcoinRewards
-- logs it and pays a reward of 0 (keeper/bitcoin_rewards.go: "treat reward as 0 but continue"): reward = 0 and
-- chain_error names it. error: why the reward is unknown (reward NULL).
CREATE OR REPLACE FUNCTION fn.theoretical_epoch_reward_safe(epoch bigint, bitcoin_reward_params jsonb,
                                                            chain_version text DEFAULT NULL,
                                                            OUT reward numeric, OUT error text, OUT chain_error text)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  initial numeric;
  decay numeric;
  genesis bigint;
  epochs numeric;
BEGIN
  IF bitcoin_reward_params IS NULL THEN
    error := 'no bitcoin_reward_params captured for the epoch';
    RETURN;
  END IF;
  initial := fn.chain_decimal(bitcoin_reward_params -> 'initial_epoch_reward');
  decay := fn.chain_decimal(bitcoin_reward_params -> 'decay_rate');
  genesis := fn.chain_decimal(bitcoin_reward_params -> 'genesis_epoch')::bigint;
  reward := fn.theoretical_epoch_reward(epoch, initial, decay, genesis, chain_version);
EXCEPTION WHEN OTHERS THEN
  reward := NULL;
  error := SQLERRM;
  BEGIN
    epochs := mod(mod(epoch::numeric - genesis, 18446744073709551616) + 18446744073709551616, 18446744073709551616);
    IF fn.chain_version_ordinal(chain_version) >= 9 AND initial > 0 AND initial = trunc(initial)
       AND initial <= 18446744073709551615 AND decay IS NOT NULL AND epochs <> 0
       AND (fn.decay_exponent(decay) IS NULL OR epochs >= 2147483647) THEN
      reward := 0;
      chain_error := error || ': CalculateFixedEpochReward fails and the chain pays an epoch reward of 0';
      error := NULL;
    END IF;
  EXCEPTION WHEN OTHERS THEN
    NULL;  -- an unknown version: the first error stands
  END;
END $$;

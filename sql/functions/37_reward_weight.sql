-- The weight CalculateParticipantBitcoinRewards (keeper/bitcoin_rewards.go, gonka-ai/gonka) pays an ACTIVE host's
-- epoch reward on, per chain version; the share itself is fn.reward_share(reward, this weight, total_weight) with
-- total_weight the sum of full weights (the denominator keeps excluded and confirmation-reduced weight, whose share
-- goes to governance). All integer: Go's big.Int Div truncates toward zero on these non-negative operands.
--
-- * v0.2.12 (d8b8e9073, "Upgrade v0.2.12 (#948)"): the confirmation weight, rescaled by weight / raw total when the
--   host's full weight is below its raw total (the coefficient-weighted sum of its ML-node PoC weights before
--   confirmation PoC, which the chain writes as the confirmation_weight of the host's rows in the model
--   sub-groups), and never above the full weight:
--     weight < raw:  floor(confirmation_weight * weight / raw)       -> 'confirmation_rescaled'
--     else:          least(confirmation_weight, weight)              -> 'confirmation_capped'
--   Checked against the chain's own payouts: every host paid in mainnet epochs 265 and 267 gets exactly this
--   share (tests/reports/test_reward_weight.py on the real chain REST captures,
--   epoch_performance_summary.rewarded_coins).
-- * v0.2.13 on (17808620, "v0.2.13: microrelease (#1143)", which added EpochGroupData.confirmation_weight_scales;
--   the rule as read in the stored revision of keeper/bitcoin_rewards.go that has
--   CalculateParticipantBitcoinRewardsWithTransfers, and types/weight.go EffectiveConfirmedWeight; the raw total
--   is ConfirmationWeightOfModelNodesWithCoefficients (types/weight.go @2d7cf779: per model in the scales,
--   trunc(coefficient x the host's ML-node PoC weight sum), summed), which the chain also writes as the host's
--   sub-group confirmation_weight; the indexer reads that stored value):
--     scales empty:  the full weight                                  -> 'full'
--     else:          raw <= 0 -> 0; else least(floor(max(confirmation_weight, 0) * weight / raw), weight)
--                                                                    -> 'confirmation_rescaled'
--   Past int64 the stored revisions part: the one computing the quotient inline in bitcoin_rewards.go takes
--   big.Int Int64(), which keeps the low 64 bits before the cap (2^32 x 2^32 / 1 gives 0; a wrapped negative pays
--   0), while types/weight.go EffectiveConfirmedWeight returns the full weight when confirmation_weight >= raw
--   before dividing. Which versions carry which is not established: a quotient past 2^63 - 1 where the two
--   differ is an error naming both figures (mainnet weights are about 10^5, far below it).
-- * before v0.2.12: not reproduced here (error): the earlier revisions read (RecomputeEffectiveWeightFromMLNodes:
--   preserved-slot PoC weight + confirmation weight, denominator after downtime) differ and their version span is
--   not established.
-- * newest stored revision (types/weight.go EffectiveWeightFromModels, RewardWeightPolicy; version not
--   established): with confirmation_accounting_separated and a scale whose has_trusted_voting_power is false,
--   the numerator is min(confirmed, raw trusted) + raw untrusted over the raw total of every model. A scale
--   published with has_trusted_voting_power = false is therefore an error here (the flag is not captured); a
--   scale without the field (chains before it; the REST gateway emits false) is trusted.
-- This is the effective weight before the power cap, which the chain applies to the effective weights of the
-- epoch's ACTIVE hosts together (ApplyPowerCappingForWeights: fn.power_cap, 39_power_cap.sql). Delegation transfers
-- and penalties (v0.2.14 on) come after the cap: fn.delegated_reward_weight (38_delegation.sql).
--
-- A weight <= 0 pays nothing (basis 'full', weight 0). error names the missing input; the weight is then NULL.
CREATE OR REPLACE FUNCTION fn.reward_weight(weight bigint, confirmation_weight bigint, raw_confirmation_weight bigint,
                                            confirmation_weight_scales jsonb, chain_version text DEFAULT NULL,
                                            OUT reward_weight bigint, OUT weight_basis text, OUT error text)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v int;
  cw bigint := greatest(confirmation_weight, 0);
  quotient numeric;
  wrapped numeric;
BEGIN
  BEGIN
    v := fn.chain_version_ordinal(chain_version);
  EXCEPTION WHEN OTHERS THEN
    error := SQLERRM;
    RETURN;
  END;
  IF weight IS NULL THEN
    error := 'no weight captured for the host (root epoch_group_data.validation_weights)';
    RETURN;
  END IF;
  IF weight <= 0 THEN
    reward_weight := 0; weight_basis := 'full';
    RETURN;
  END IF;
  IF v < 13 THEN
    error := 'the reward weight rule of chain ' || chain_version || ' is not reproduced (v0.2.12 and later are)';
    RETURN;
  END IF;
  IF v >= 14 THEN
    IF confirmation_weight_scales IS NULL THEN
      error := 'no confirmation_weight_scales captured for the epoch (chain v0.2.13 on pays full weight when '
               || 'they are empty, the rescaled confirmation weight otherwise)';
      RETURN;
    END IF;
    IF confirmation_weight_scales IN ('{}'::jsonb, '[]'::jsonb) THEN
      reward_weight := weight; weight_basis := 'full';
      RETURN;
    END IF;
    IF jsonb_typeof(confirmation_weight_scales) = 'object' AND EXISTS (
         SELECT 1 FROM jsonb_each(confirmation_weight_scales) m
         WHERE m.value -> 'has_trusted_voting_power' = 'false'::jsonb) THEN
      error := 'the epoch''s confirmation_weight_scales name a model without trusted voting power: the chain '
               || 'revision with types.EffectiveWeightFromModels then pays that model''s raw weight on top of the '
               || 'confirmed trusted weight when the epoch separates confirmation accounting '
               || '(confirmation_accounting_separated, not captured), which this rule does not reproduce';
      RETURN;
    END IF;
  END IF;
  IF confirmation_weight IS NULL THEN
    error := 'no confirmation_weight captured for the host';
    RETURN;
  END IF;
  IF raw_confirmation_weight IS NULL THEN
    error := 'no raw confirmation weight captured for the host (its rows in the model sub-groups of '
             || 'epoch_group_data)';
    RETURN;
  END IF;
  IF v = 13 THEN
    IF weight < raw_confirmation_weight THEN
      reward_weight := div(cw::numeric * weight, raw_confirmation_weight)::bigint;
      weight_basis := 'confirmation_rescaled';
    ELSE
      reward_weight := least(cw, weight); weight_basis := 'confirmation_capped';
    END IF;
    RETURN;
  END IF;
  weight_basis := 'confirmation_rescaled';
  IF raw_confirmation_weight <= 0 THEN
    reward_weight := 0;
  ELSE
    quotient := div(cw::numeric * weight, raw_confirmation_weight);
    wrapped := greatest(least(fn.go_int64_wrap(quotient), weight), 0);   -- inline big.Int Int64(), then the cap
    IF quotient > 9223372036854775807 AND wrapped <> weight THEN
      weight_basis := NULL;
      error := 'the rescaled weight of chain ' || COALESCE(chain_version, 'newest') || ' is not established for '
               || 'these inputs: confirmation_weight x weight / raw = ' || quotient || ' is past int64; the revision '
               || 'taking big.Int Int64() pays ' || wrapped || ', the one with EffectiveConfirmedWeight pays '
               || weight;
      RETURN;
    END IF;
    reward_weight := least(quotient, weight)::bigint;
  END IF;
END $$;
COMMENT ON FUNCTION fn.reward_weight(bigint, bigint, bigint, jsonb, text) IS
  'the weight CalculateParticipantBitcoinRewards pays a host on in the given chain version, and which basis '
  '(confirmation_capped, confirmation_rescaled, full); error names what is missing (docs/chain-math.md)';

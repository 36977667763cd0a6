-- Delegation and the epoch reward (chain v0.2.14 on: upgrade handler app/upgrades/v0_2_14 @8ca9be379e5f).
--
-- CalculateParticipantBitcoinRewardsWithTransfers (gonka-ai/gonka inference-chain/x/inference/keeper/
-- bitcoin_rewards.go, the stored revision after PR #1378 "PoC delegation reward-only"; the per-epoch snapshot in
-- keeper/delegation_reward_transfer.go @eb6b79b72) changes the reward weights after the power cap and the downtime
-- test, before the shares are paid, and never the denominator (the sum of full weights):
--   1. penalties (refusal, no participation; DelegationRewardPenalty): w -= min(trunc(fraction x w0), w), w0 the
--      weight before any penalty, one subtraction per entry (duplicates add up, clamped at 0);
--   2. transfers (a host that delegates a model to another; DelegationRewardTransfer {model, from, to, share}):
--      amount = min(trunc(share x b), what the source has left), b the source's weight after the penalties; the
--      source loses it and the delegatee gains it if its own weight is positive. share is the governance
--      delegation_params.delegation_share (0.05 on mainnet), one transfer per model the host delegates.
-- trunc = delegationShareOfWeight: LegacyDec(share).MulInt64(w).TruncateInt64(), toward zero (exact here: a
-- published share has at most 18 decimals).
--
-- Which hosts delegate, and which are penalised, is the epoch's DelegationRewardTransferSnapshot, which the chain
-- keeps for the epoch being settled only and the indexer does not capture: fn.delegation_status says so per host.

-- The reward weight of a host that delegates `transfers` models and is penalised by `penalty_fraction` (summed
-- fractions), from its weight after the power cap and the downtime test. NULL share or fraction: unknown.
CREATE OR REPLACE FUNCTION fn.delegated_reward_weight(weight bigint, share numeric, transfers int DEFAULT 1,
                                                      penalty_fraction numeric DEFAULT 0)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  w numeric := greatest(weight, 0);
  amount numeric;
BEGIN
  IF weight IS NULL OR share IS NULL OR penalty_fraction IS NULL OR transfers IS NULL THEN
    RETURN NULL;
  END IF;
  IF transfers < 0 THEN
    RAISE EXCEPTION USING MESSAGE = 'transfers must be >= 0 (got ' || transfers || ')',
                          ERRCODE = 'invalid_parameter_value';
  END IF;
  w := w - least(greatest(trunc(penalty_fraction * w), 0), w);
  amount := greatest(trunc(share * w), 0);
  RETURN (w - least(amount * transfers, w))::bigint;
END $$;
COMMENT ON FUNCTION fn.delegated_reward_weight(bigint, numeric, int, numeric) IS
  'a host''s reward weight after delegation penalties and its reward transfers to delegatees (chain v0.2.14 on, '
  'applyDelegationRewardPenalties / applyDelegationRewardTransfers), from its weight after the downtime test';

-- Per host with a restitution amount: whether delegation can change what it is owed. NULL when the amount itself
-- is unknown; 'not_applicable' when there is nothing to pay or the chain version has no delegation transfers;
-- otherwise 'unknown: ...' naming what is missing and what the amount would be if the host delegated one model.
CREATE OR REPLACE FUNCTION fn.delegation_status(chain_version text, restitution_amount numeric,
                                                delegation_share numeric, amount_if_delegating numeric)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v int;
BEGIN
  IF restitution_amount IS NULL THEN
    RETURN NULL;
  END IF;
  IF restitution_amount = 0 THEN
    RETURN 'not_applicable';
  END IF;
  BEGIN
    v := fn.chain_version_ordinal(chain_version);
  EXCEPTION WHEN OTHERS THEN
    RETURN 'unknown: ' || SQLERRM;
  END;
  IF v < fn.chain_version_ordinal('v0.2.14') THEN
    RETURN 'not_applicable';
  END IF;
  IF delegation_share IS NULL THEN
    RETURN 'unknown: no delegation_params captured for the epoch, and the epoch''s delegation reward transfers '
           || '(DelegationRewardTransferSnapshot) are not captured: whether the host delegated is not known';
  END IF;
  RETURN 'unknown: the epoch''s delegation reward transfers and penalties (DelegationRewardTransferSnapshot) are '
         || 'not captured: if the host delegated one model it is owed ' || amount_if_delegating
         || ' ngonka (delegation_share ' || delegation_share || ' of its weight to its delegatee), less for each '
         || 'further model or penalty, more if others delegated to it';
END $$;
COMMENT ON FUNCTION fn.delegation_status(text, numeric, numeric, numeric) IS
  'not_applicable (nothing to pay, or a chain version before v0.2.14) or unknown: why delegation may change a '
  'restitution amount (docs/restitution.md "Delegation")';

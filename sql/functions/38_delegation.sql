-- Delegation and the epoch reward (chain v0.2.14 on: upgrade handler app/upgrades/v0_2_14 @8ca9be379e5f).
--
-- CalculateParticipantBitcoinRewardsWithTransfers (gonka-ai/gonka inference-chain/x/inference/keeper/
-- bitcoin_rewards.go, the stored revision after PR #1378 "PoC delegation reward-only"; the per-epoch snapshot in
-- keeper/delegation_reward_transfer.go @eb6b79b72) changes the reward weights after the power cap and the downtime
-- test, before the shares are paid, and never the denominator (the sum of full weights):
--   1. penalties (refusal, no participation; DelegationRewardPenalty): w -= min(trunc(fraction x w0), w), w0 the
--      weight before any penalty, one subtraction per entry (each entry truncated on its own, clamped at 0);
--   2. transfers (a host that delegates a model to another; DelegationRewardTransfer {model, from, to, share}):
--      amount = min(trunc(share x b), what the source has left), b the source's weight after the penalties; the
--      source loses it and the delegatee gains it if its own weight is positive. share is the governance
--      delegation_params.delegation_share (0.05 on mainnet), one transfer per model the host delegates.
-- trunc = delegationShareOfWeight: LegacyDec(share).MulInt64(w).TruncateInt64(), toward zero; a share of more than
-- 18 decimals fails LegacyNewDecFromStr and moves nothing (fn.delegation_share_of_weight).
--
-- Which hosts delegate, and which are penalised, is the epoch's DelegationRewardTransferSnapshot, which the chain
-- keeps for the epoch being settled only and the indexer does not capture: fn.delegation_status says so per host.

-- delegationShareOfWeight(share, w): share.ToLegacyDec() is LegacyNewDecFromStr of the decimal's string, which
-- refuses more than 18 decimal places (the share then moves nothing); otherwise LegacyDec MulInt64 is exact and
-- TruncateInt64 truncates toward zero; a negative amount, w = 0 or w past int64 move nothing.
CREATE OR REPLACE FUNCTION fn.delegation_share_of_weight(share numeric, weight numeric)
RETURNS numeric LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT CASE WHEN weight <= 0 OR weight > 9223372036854775807 OR scale(trim_scale(share)) > 18 THEN 0
              ELSE greatest(trunc(share * weight), 0) END
$$;

-- The reward weight of a host from its weight after the power cap and the downtime test, given the epoch's
-- penalty entries against it (penalty_fractions, applyDelegationRewardPenalties: each removes
-- delegationShareOfWeight(fraction, w0) of the weight w0 before any penalty, at most what is left, one entry at a
-- time, so two entries of 0.5 on 3 remove 1 + 1, not 3) and its transfers to delegatees (transfer_shares,
-- applyDelegationRewardTransfers: each moves delegationShareOfWeight(share, b) of the weight b after the penalties,
-- at most what is left). Incoming transfers are not counted. NULL weight, share or fraction: unknown.
CREATE OR REPLACE FUNCTION fn.delegated_reward_weight_entries(weight bigint, transfer_shares numeric[],
                                                              penalty_fractions numeric[])
RETURNS bigint LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  w numeric := greatest(weight, 0);
  base numeric;
  x numeric;
BEGIN
  IF weight IS NULL OR transfer_shares IS NULL OR penalty_fractions IS NULL
     OR array_position(transfer_shares, NULL) IS NOT NULL OR array_position(penalty_fractions, NULL) IS NOT NULL THEN
    RETURN NULL;
  END IF;
  base := w;
  FOREACH x IN ARRAY penalty_fractions LOOP
    w := w - least(fn.delegation_share_of_weight(x, base), w);
  END LOOP;
  base := w;
  FOREACH x IN ARRAY transfer_shares LOOP
    w := w - least(fn.delegation_share_of_weight(x, base), w);
  END LOOP;
  RETURN w::bigint;
END $$;
COMMENT ON FUNCTION fn.delegated_reward_weight_entries(bigint, numeric[], numeric[]) IS
  'a host''s reward weight after its delegation penalty entries and its reward transfers, one entry at a time as '
  'applyDelegationRewardPenalties / applyDelegationRewardTransfers apply them (chain v0.2.14 on)';

-- The same for a host that delegates `transfers` models at one share and has at most one penalty entry
-- (penalty_fraction: that entry's fraction; 0 = none).
CREATE OR REPLACE FUNCTION fn.delegated_reward_weight(weight bigint, share numeric, transfers int DEFAULT 1,
                                                      penalty_fraction numeric DEFAULT 0)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF weight IS NULL OR share IS NULL OR penalty_fraction IS NULL OR transfers IS NULL THEN
    RETURN NULL;
  END IF;
  IF transfers < 0 THEN
    RAISE EXCEPTION USING MESSAGE = 'transfers must be >= 0 (got ' || transfers || ')',
                          ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN fn.delegated_reward_weight_entries(weight, array_fill(share, ARRAY[transfers]),
                                            CASE WHEN penalty_fraction = 0 THEN '{}'::numeric[]
                                                 ELSE ARRAY[penalty_fraction] END);
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

-- How a settled escrow's host stats become SPRT passes (CurrentEpochStats.ValidatedInferences) in the chain's
-- revisions with per-protocol-name pass-count policies (v0.2.16 on): gonka-ai/gonka
-- inference-chain/x/inference/keeper/devshard_host_stats.go (DevshardPassPolicy, passScores, DevshardSprtPassCap;
-- the revision documented in devshard/docs "Settlement pass_count") and its tests in devshard_host_stats_test.go
-- (@0c9ec8c752932dda1740578163c01ca93f07fd63 and later). A name with policy DERIVED is credited assigned - missed -
-- invalid per slot (the formula of v0.2.12 on, which api.restitution_steps uses); a name with policy SAMPLED, when
-- the chain-wide flag devshard_escrow_params.apply_sampled_pass_count is on, the slot's reported validated count
-- capped by the escrow's sampling rate. The revisions disagree on the defaults (one made SAMPLED the default and had
-- an apply_derived_pass_count flag instead) and the per-name policy store is a separate chain query, so the indexer
-- keeps the DERIVED count and reports the flags beside it (api.restitution_impact evidence.pass_count_policy).

-- DevshardSprtPassCap(finished, validationRateBps) = 2*finished*uint64(validationRateBps)/10000 + 2, in Go uint64
-- arithmetic (the product and the sum wrap at 2^64; Go's unsigned division truncates).
CREATE OR REPLACE FUNCTION fn.devshard_sprt_pass_cap(finished numeric, validation_rate_bps numeric)
RETURNS numeric LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT mod(div(mod(2 * finished * validation_rate_bps, 18446744073709551616), 10000) + 2, 18446744073709551616)
$$;

-- passScores' sampled count for one slot: finished capped at completed (assigned - missed), then the reported
-- validated count capped by DevshardSprtPassCap. What the chain credits when the flag applies it.
CREATE OR REPLACE FUNCTION fn.devshard_sampled_passes(validated numeric, finished numeric, completed numeric,
                                                      validation_rate_bps numeric)
RETURNS numeric LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT LEAST(validated, fn.devshard_sprt_pass_cap(LEAST(finished, completed), validation_rate_bps))
$$;

-- The pass-count switches an epoch's devshard_escrow_params snapshot carries (apply_sampled_pass_count in the
-- revision above; apply_derived_pass_count in one before it, where SAMPLED was the default), as one object; {} when
-- the snapshot has none (proto3 JSON leaves a false bool out), NULL when no snapshot was captured.
CREATE OR REPLACE FUNCTION fn.pass_count_flags(devshard_escrow_params jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN jsonb_typeof(devshard_escrow_params) = 'object' THEN
           COALESCE((SELECT jsonb_object_agg(key, value) FROM jsonb_each(devshard_escrow_params)
                     WHERE key ~ '^apply_[a-z_]+_pass_count$'), '{}'::jsonb) END
$$;

-- Does a settlement at settled_height miss its epoch's host counters? MsgSettleDevshardEscrow
-- (keeper/msg_server_settle_devshard_escrow.go, every stored revision) adds an escrow's host stats to a host's
-- CurrentEpochStats (the SPRT's and the downtime test's inputs) only while the escrow's epoch is the effective one
-- (treatAsCurrentEpochSettle; later revisions also require that the host's epoch is not settled yet). An escrow
-- settled in the next epoch is paid but never counted. The epoch's end is its group's last_block_height
-- (rec.epoch.end_height; 0 or NULL while it runs): a settlement above it was in the next epoch. Unknown heights
-- give false (counted, as before the rule was known); the restitution evidence says whether heights were known.
CREATE OR REPLACE FUNCTION fn.settled_after_epoch(settled_height bigint, epoch_end_height bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT COALESCE(settled_height > NULLIF(epoch_end_height, 0), false)
$$;

-- devshardAssignedUpperBoundForSlot (keeper/devshard_settlement.go, every stored revision): the inferences a slot
-- may have been assigned up to the settled nonce, by the executor routing inference_id == nonce and
-- executor_slot = inference_id mod slot_count (nonce 0 is no inference, so slot 0 starts at slot_count). The chain
-- credits assigned - missed as completed and assigned - missed - invalid as passes (DERIVED) from this bound, not
-- from the inferences that ran: every nonce of the slot's residue class counts.
CREATE OR REPLACE FUNCTION fn.devshard_assigned_upper_bound(settle_nonce bigint, slot_count int, slot_id int)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  first_assigned bigint := CASE WHEN slot_id = 0 THEN slot_count ELSE slot_id END;
BEGIN
  IF slot_count <= 0 THEN
    RAISE EXCEPTION USING MESSAGE = 'slot count cannot be zero', ERRCODE = 'invalid_parameter_value';
  END IF;
  IF slot_id < 0 OR slot_id >= slot_count THEN
    RAISE EXCEPTION USING MESSAGE = 'slot ' || slot_id || ' out of range for slot count ' || slot_count,
                          ERRCODE = 'invalid_parameter_value';
  END IF;
  IF settle_nonce < first_assigned THEN
    RETURN 0;
  END IF;
  RETURN 1 + (settle_nonce - first_assigned) / slot_count;  -- integer division truncates, as Go's on uint64
END $$;

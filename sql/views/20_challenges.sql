-- api.challenges: one row per inference a MsgValidation{valid:false} challenged, with the replayed tally.
CREATE VIEW api.challenges AS
SELECT i.escrow_id,
       i.inference_id,
       i.epoch_index,
       i.executor_slot,
       i.executor_address,
       i.vote_threshold,
       i.votes_valid,
       i.votes_invalid,
       i.status AS outcome,
       i.challenged_nonce,
       i.challenger_slot,
       i.resolved_nonce
FROM replay.inference i
WHERE i.challenged_nonce IS NOT NULL;

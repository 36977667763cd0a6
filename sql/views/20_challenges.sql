-- api.challenges: one row per inference a MsgValidation{valid:false} challenged: the replayed tally, and the
-- invalid weight from raised-limit suspects with the outcome the tally would have had without them.
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
       c.suspect_invalid_weight,
       c.outcome_without_suspects,
       c.suspect_voters,
       c.is_client_fault_finish,
       i.challenged_nonce,
       i.challenger_slot,
       i.resolved_nonce
FROM replay.inference i
LEFT JOIN rules.challenge c ON c.escrow_id = i.escrow_id AND c.inference_id = i.inference_id
WHERE i.challenged_nonce IS NOT NULL;

-- api.inferences: one row per inference, protocol state from the replay, request/usage from the signed txs.
CREATE VIEW api.inferences AS
SELECT i.escrow_id,
       i.inference_id,
       e.epoch_index,
       e.model_id,
       i.executor_slot,
       i.executor_address,
       i.status,
       s.prompt_hash,
       s.input_length,
       s.max_tokens,
       f.input_tokens,
       f.output_tokens,
       -- true when a stored payload confirms a 0/0 client fault; a 0/0 Finish without payload is unknown (null)
       CASE WHEN f.inference_id IS NULL THEN false
            WHEN f.input_tokens <> 0 OR f.output_tokens <> 0 THEN false
            ELSE p.is_client_fault END AS is_client_fault,
       i.penalty,
       i.votes_valid,
       i.votes_invalid,
       i.vote_threshold,
       i.status_nonce,
       i.timeout_reason,
       s.model AS request_model,
       s.diff_nonce AS start_nonce,
       f.diff_nonce AS finish_nonce,
       f.response_hash
FROM replay.inference i
LEFT JOIN rec.escrow e ON e.escrow_id = i.escrow_id
LEFT JOIN rec.start_tx s ON s.escrow_id = i.escrow_id AND s.inference_id = i.inference_id
LEFT JOIN rec.finish_tx f ON f.escrow_id = i.escrow_id AND f.inference_id = i.inference_id
LEFT JOIN rules.refusal_parse p ON p.escrow_id = i.escrow_id AND p.inference_id = i.inference_id;

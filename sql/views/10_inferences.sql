-- api.inferences: one row per inference, protocol state from the replay, request/usage from the signed txs.
-- epoch_index is the replay's (its escrow's epoch when replayed), and the txs are joined within that epoch's
-- partition: a filter on epoch_index reads one partition of each table (docs/partitioning.md).
CREATE VIEW api.inferences AS
SELECT i.escrow_id,
       i.inference_id,
       i.epoch_index,
       e.model_id,
       i.executor_slot,
       i.executor_address,
       i.status,
       s.prompt_hash,
       s.input_length,
       s.max_tokens,
       f.input_tokens,
       f.output_tokens,
       -- gonka-devshard.md §3.6: false without a 0/0 Finish, the payload's verdict for a 0/0 Finish with one,
       -- NULL (unknown) for a 0/0 Finish whose payload is not stored
       fn.is_client_fault_finish(f.input_tokens, f.output_tokens, f.response_payload IS NOT NULL,
                                 parse.is_client_fault) AS is_client_fault,
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
                         AND s.epoch_index = i.epoch_index
LEFT JOIN rec.finish_tx f ON f.escrow_id = i.escrow_id AND f.inference_id = i.inference_id
                          AND f.epoch_index = i.epoch_index
LEFT JOIN rules.refusal_parse parse ON parse.escrow_id = i.escrow_id AND parse.inference_id = i.inference_id;

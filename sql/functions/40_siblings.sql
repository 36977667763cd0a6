-- Siblings (gonka-devshard.md §2.4): the other inferences of the same escrow whose Start signed the same non-empty
-- prompt hash, with their signed Finish counts: only a Finish the escrow applied (replay.inference.finished_nonce is
-- its nonce). A Finish the state machine rejected (on a Pending record, or naming a slot that is not the executor's)
-- is no executor's signed count, so it must neither show a request fits nor show it over the limit. A sibling's
-- input_tokens is a signed count of the prompt that the rules trust above the executor's text and the gateway's
-- estimate (interface.md §3, prompt_tokens_source).
-- Both functions are single SQL SELECTs over the tables, STABLE and not STRICT, so the planner inlines them into the
-- calling query: a LATERAL call becomes a probe of the hash index on escrow_id || '/' || prompt_hash (migration 0016:
-- the one expression below is what the index holds; the column equalities keep the result exact). `epochs` names the
-- epoch partitions of the tx tables to read (docs/partitioning.md), the escrow's among them: all rows of one escrow
-- are in its epoch's partition, so the result is the same, and a caller passing constants (the rules' epoch list)
-- has every other partition pruned when the call is planned instead of at each probe.

-- fn.sibling_finishes(escrow_id, prompt_hash, inference_id, epochs): every Finished sibling of that inference.
-- The rules that need a sibling choose among these: the sibling rule by its status at a nonce (30), the prompt count by the largest
-- input (fn.largest_sibling).
CREATE FUNCTION fn.sibling_finishes(escrow_id text, prompt_hash text, inference_id bigint, epochs bigint[])
RETURNS TABLE (sibling_inference_id bigint, input_tokens bigint, output_tokens bigint)
LANGUAGE sql STABLE AS $$
  SELECT sibling_finish.inference_id, sibling_finish.input_tokens, sibling_finish.output_tokens
  FROM rec.start_tx sibling_start
  JOIN rec.finish_tx sibling_finish ON sibling_finish.escrow_id = sibling_start.escrow_id
                                   AND sibling_finish.inference_id = sibling_start.inference_id
                                   AND sibling_finish.epoch_index = ANY(sibling_finishes.epochs)
  JOIN replay.inference sibling_record ON sibling_record.escrow_id = sibling_finish.escrow_id
                                      AND sibling_record.inference_id = sibling_finish.inference_id
                                      AND sibling_record.epoch_index = ANY(sibling_finishes.epochs)
                                      AND sibling_record.finished_nonce = sibling_finish.diff_nonce
  WHERE sibling_start.escrow_id = sibling_finishes.escrow_id
    AND sibling_start.epoch_index = ANY(sibling_finishes.epochs)
    AND sibling_start.escrow_id || '/' || sibling_start.prompt_hash
        = sibling_finishes.escrow_id || '/' || sibling_finishes.prompt_hash
    AND sibling_start.prompt_hash = sibling_finishes.prompt_hash AND sibling_finishes.prompt_hash <> ''
    AND sibling_start.inference_id <> sibling_finishes.inference_id
$$;

-- fn.largest_sibling(escrow_id, prompt_hash, inference_id, epochs): the sibling Finish that served the prompt
-- with the largest signed input_tokens (ties: the lowest inference id), beside the smallest such count and how many siblings
-- served it. The largest, because any signed count that shows a request cannot fit protects the host. Only served
-- counts (input_tokens > 0): a sibling's own 0/0 refusal says nothing about the prompt's size. No row when there is
-- no such sibling.
CREATE FUNCTION fn.largest_sibling(escrow_id text, prompt_hash text, inference_id bigint, epochs bigint[])
RETURNS TABLE (sibling_inference_id bigint, sibling_input_tokens bigint, min_input_tokens bigint, siblings bigint)
LANGUAGE sql STABLE AS $$
  SELECT (array_agg(s.sibling_inference_id ORDER BY s.input_tokens DESC, s.sibling_inference_id))[1],
         max(s.input_tokens), min(s.input_tokens), count(*)
  FROM fn.sibling_finishes(largest_sibling.escrow_id, largest_sibling.prompt_hash, largest_sibling.inference_id,
                           largest_sibling.epochs) s
  WHERE s.input_tokens > 0
  HAVING count(*) > 0
$$;

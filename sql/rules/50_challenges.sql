-- Every challenged inference: the invalid weight that came from raised-limit suspects (same epoch and model) and
-- the outcome the tally would have had without their votes. The counterfactual replays the applied weights in
-- protocol order (invalid checked first after each vote). Without a suspect challenger there is no challenge at
-- all: the record would have stayed Finished.
DELETE FROM rules.challenge WHERE epoch_index = ANY(%(epochs)s);

INSERT INTO rules.challenge
WITH ch AS (
  SELECT i.escrow_id, i.inference_id, i.epoch_index, i.challenged_nonce, i.challenger_slot, i.vote_threshold,
         e.slots, e.model_id
  FROM replay.inference i JOIN rec.escrow e ON e.escrow_id = i.escrow_id
  WHERE i.epoch_index = ANY(%(epochs)s) AND i.challenged_nonce IS NOT NULL
), cast_weights AS (  -- LATERAL: index lookups per challenge, so one epoch never scans all votes
  SELECT ch.escrow_id, ch.inference_id, v.diff_nonce, v.kind_order, v.slot, v.valid, v.is_validation
  FROM ch CROSS JOIN LATERAL (
    SELECT diff_nonce, 3 AS kind_order, validator_slot AS slot, valid, true AS is_validation
    FROM rec.validation_tx
    WHERE escrow_id = ch.escrow_id AND inference_id = ch.inference_id AND diff_nonce <= ch.challenged_nonce
    UNION ALL
    SELECT diff_nonce, 4, voter_slot, vote_valid, false
    FROM rec.validation_vote_tx WHERE escrow_id = ch.escrow_id AND inference_id = ch.inference_id) v
), applied AS (  -- not rejected by the state machine; 'ignored' = cast after the tally resolved (no weight)
  SELECT w.*, COALESCE(r.ignored, false) AS ignored
  FROM cast_weights w
  LEFT JOIN replay.rejected_tx r
         ON r.escrow_id = w.escrow_id AND r.inference_id = w.inference_id AND r.diff_nonce = w.diff_nonce
        AND r.slot = w.slot AND r.kind = CASE WHEN w.is_validation THEN 'validation' ELSE 'validation_vote' END
  WHERE r.ignored IS DISTINCT FROM false
), slot_weight AS (  -- weight = slots held by the slot's address, computed once per escrow
  SELECT g.escrow_id, (s.ord - 1)::int AS slot, s.address,
         count(*) OVER (PARTITION BY g.escrow_id, s.address)::int AS weight
  FROM (SELECT DISTINCT escrow_id, slots FROM ch) g CROSS JOIN LATERAL unnest(g.slots) WITH ORDINALITY s(address, ord)
), suspects AS (
  SELECT DISTINCT epoch_index, model_id, participant FROM rules.suspect WHERE epoch_index = ANY(%(epochs)s)
), weighted AS MATERIALIZED (
  SELECT a.*, ch.vote_threshold, ch.challenger_slot, sw.address, sw.weight, sp.participant IS NOT NULL AS suspect
  FROM applied a
  JOIN ch ON ch.escrow_id = a.escrow_id AND ch.inference_id = a.inference_id
  JOIN slot_weight sw ON sw.escrow_id = a.escrow_id AND sw.slot = a.slot
  LEFT JOIN suspects sp ON sp.epoch_index = ch.epoch_index AND sp.model_id IS NOT DISTINCT FROM ch.model_id
                       AND sp.participant = sw.address
), running AS (
  SELECT w.*,
         sum(CASE WHEN NOT w.suspect AND NOT w.valid THEN w.weight ELSE 0 END) OVER seq AS inv_wo,
         sum(CASE WHEN NOT w.suspect AND w.valid THEN w.weight ELSE 0 END) OVER seq AS val_wo,
         row_number() OVER seq AS step
  FROM weighted w
  WINDOW seq AS (PARTITION BY w.escrow_id, w.inference_id ORDER BY w.diff_nonce, w.kind_order, w.slot
                 ROWS UNBOUNDED PRECEDING)
), tallied AS (
  SELECT escrow_id, inference_id,
         sum(weight) FILTER (WHERE suspect AND NOT valid AND NOT ignored)::int
           AS suspect_invalid_weight,
         array_agg(DISTINCT address) FILTER (WHERE suspect AND NOT valid AND NOT ignored) AS suspect_voters,
         bool_or(is_validation AND slot = challenger_slot AND suspect) AS challenger_suspect,
         min(step) FILTER (WHERE NOT is_validation AND NOT suspect AND inv_wo > vote_threshold) AS inv_step,
         min(step) FILTER (WHERE NOT is_validation AND NOT suspect AND val_wo > vote_threshold) AS val_step
  FROM running GROUP BY escrow_id, inference_id
)
SELECT ch.escrow_id, ch.inference_id, ch.epoch_index,
       COALESCE(f.input_tokens = 0 AND f.output_tokens = 0 AND COALESCE(p.is_client_fault, f.response_payload IS NULL),
                false),
       COALESCE(t.suspect_invalid_weight, 0), t.suspect_voters,
       CASE WHEN t.challenger_suspect THEN 'Finished'
            WHEN t.inv_step IS NOT NULL AND (t.val_step IS NULL OR t.inv_step <= t.val_step) THEN 'Invalidated'
            WHEN t.val_step IS NOT NULL THEN 'Validated'
            ELSE 'Challenged' END,
       %(version)s
FROM ch
LEFT JOIN tallied t ON t.escrow_id = ch.escrow_id AND t.inference_id = ch.inference_id
LEFT JOIN rec.finish_tx f ON f.escrow_id = ch.escrow_id AND f.inference_id = ch.inference_id
LEFT JOIN rules.refusal_parse p ON p.escrow_id = ch.escrow_id AND p.inference_id = ch.inference_id;

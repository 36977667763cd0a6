-- Every challenged inference: the invalid weight that came from raised-limit suspects (same epoch and model) and
-- the outcome the tally would have had without their votes. The counterfactual re-runs the weights the replay
-- recorded (replay.vote, protocol order): applied weights, plus votes cast after the real tally had resolved
-- (without the suspects it might not have), invalid checked first after each vote. Without a suspect
-- challenger there is no challenge at all: the record would have stayed Finished.
-- Suspects count for the challenged record's own model (its Start's, fn.record_limit). When that model's limit is
-- unknown, so is who served or stated above it: the suspects' weight, voters and the outcome without them are then
-- unknown (NULL), never 0 and the unchanged outcome.
-- A row depends on its escrow's records and on the epoch's set of suspects: with %(scoped)s (that set unchanged by
-- 40, indexer.rules.run) only the changed escrows' rows are rewritten, else the whole epoch's.
DELETE FROM rules.challenge
WHERE epoch_index = ANY(%(epochs)s) AND (NOT %(scoped)s OR escrow_id = ANY(%(escrows)s));

INSERT INTO rules.challenge (escrow_id, inference_id, epoch_index, is_client_fault_finish, suspect_invalid_weight,
                             suspect_voters, outcome_without_suspects, rule_version)
WITH challenged AS (
  SELECT i.escrow_id, i.inference_id, i.epoch_index, i.challenger_slot, i.vote_threshold, e.model_id
  FROM replay.inference i JOIN rec.escrow e ON e.escrow_id = i.escrow_id
  WHERE NOT %(scoped)s AND i.epoch_index = ANY(%(epochs)s) AND i.challenged_nonce IS NOT NULL
  UNION ALL  -- scoped: the changed escrows' inferences, read by escrow (the challenged test outside the OFFSET 0
             -- subquery, so the planner cannot walk the epoch's partial index of challenges instead)
  SELECT i.escrow_id, i.inference_id, i.epoch_index, i.challenger_slot, i.vote_threshold, e.model_id
  FROM rec.escrow e
  CROSS JOIN LATERAL (
    SELECT escrow_id, inference_id, epoch_index, challenger_slot, vote_threshold, challenged_nonce
    FROM replay.inference WHERE escrow_id = e.escrow_id AND epoch_index = ANY(%(epochs)s)
    OFFSET 0) i
  WHERE %(scoped)s AND e.escrow_id = ANY(%(escrows)s) AND i.challenged_nonce IS NOT NULL
), judged AS (  -- each challenged record's model and whether its limit is known
  SELECT ch.escrow_id, ch.inference_id, ch.epoch_index, ch.challenger_slot, ch.vote_threshold, lim.model_id,
         lim.governance_limit IS NOT NULL AS limit_known
  FROM challenged ch
  LEFT JOIN rules.escrow_limit el ON el.escrow_id = ch.escrow_id
  LEFT JOIN rec.start_tx s ON s.escrow_id = ch.escrow_id AND s.inference_id = ch.inference_id
                          AND s.epoch_index = ch.epoch_index AND s.epoch_index = ANY(%(parts)s)
  CROSS JOIN LATERAL fn.record_limit(ch.model_id, el.governance_limit, el.limit_source, ch.epoch_index, s.model) lim
), suspects AS (
  SELECT DISTINCT epoch_index, model_id, participant FROM rules.suspect WHERE epoch_index = ANY(%(epochs)s)
), weighted AS (
  SELECT v.escrow_id, v.inference_id, v.ordinal, v.kind, v.slot, v.address, v.weight, v.valid, v.effect,
         ch.vote_threshold, ch.challenger_slot, sp.participant IS NOT NULL AS suspect
  FROM judged ch
  JOIN replay.vote v ON v.escrow_id = ch.escrow_id AND v.inference_id = ch.inference_id AND v.effect <> 'no_weight'
  LEFT JOIN suspects sp ON sp.epoch_index = ch.epoch_index AND sp.model_id IS NOT DISTINCT FROM ch.model_id
                       AND sp.participant = v.address
), running AS (
  SELECT w.*,
         sum(CASE WHEN NOT w.suspect AND NOT w.valid THEN w.weight ELSE 0 END) OVER seq AS invalid_without_suspects,
         sum(CASE WHEN NOT w.suspect AND w.valid THEN w.weight ELSE 0 END) OVER seq AS valid_without_suspects,
         row_number() OVER seq AS step
  FROM weighted w
  WINDOW seq AS (PARTITION BY w.escrow_id, w.inference_id ORDER BY w.ordinal ROWS UNBOUNDED PRECEDING)
), tallied AS (
  SELECT escrow_id, inference_id,
         sum(weight) FILTER (WHERE suspect AND NOT valid AND effect = 'weight')::int AS suspect_invalid_weight,
         array_agg(DISTINCT address) FILTER (WHERE suspect AND NOT valid AND effect = 'weight') AS suspect_voters,
         bool_or(kind = 'validation' AND slot = challenger_slot AND suspect) AS challenger_suspect,
         -- the first non-suspect vote after which a side's weight without the suspects exceeds the threshold
         min(step) FILTER (WHERE kind = 'validation_vote' AND NOT suspect
                             AND invalid_without_suspects > vote_threshold) AS invalidated_at_step,
         min(step) FILTER (WHERE kind = 'validation_vote' AND NOT suspect
                             AND valid_without_suspects > vote_threshold) AS validated_at_step
  FROM running GROUP BY escrow_id, inference_id
)
SELECT ch.escrow_id, ch.inference_id, ch.epoch_index,
       -- The column is NOT NULL, so an unknown (a 0/0 Finish without payload) must become a decision: true. The
       -- executor signs 0/0 only for a client fault (gonka-devshard.md §2.1), and the validators, who hold the
       -- payload, judge a stored client fault as one (§3.8): a challenged 0/0 Finish is on the #2078 invalidation path
       -- unless its payload says otherwise. It decides no penalty here; api.inferences.is_client_fault keeps NULL.
       -- The parse is looked up only for 0/0 Finishes with a payload (a join would hash every epoch's parses for
       -- one epoch; the inlined function evaluates the subquery only there).
       COALESCE(fn.is_client_fault_finish(f.input_tokens, f.output_tokens, f.response_payload IS NOT NULL,
                                          (SELECT parse.is_client_fault FROM rules.refusal_parse parse
                                           WHERE parse.escrow_id = ch.escrow_id
                                             AND parse.inference_id = ch.inference_id)),
                true),
       CASE WHEN ch.limit_known THEN COALESCE(t.suspect_invalid_weight, 0) END,
       CASE WHEN ch.limit_known THEN t.suspect_voters END,
       CASE WHEN NOT ch.limit_known THEN NULL
            WHEN t.challenger_suspect THEN 'Finished'
            WHEN t.invalidated_at_step IS NOT NULL
                 AND (t.validated_at_step IS NULL OR t.invalidated_at_step <= t.validated_at_step) THEN 'Invalidated'
            WHEN t.validated_at_step IS NOT NULL THEN 'Validated'
            ELSE 'Challenged' END,
       %(version)s
FROM judged ch
LEFT JOIN tallied t ON t.escrow_id = ch.escrow_id AND t.inference_id = ch.inference_id
LEFT JOIN rec.finish_tx f ON f.escrow_id = ch.escrow_id AND f.inference_id = ch.inference_id
                         AND f.epoch_index = ch.epoch_index AND f.epoch_index = ANY(%(parts)s);

-- A host has disputable penalties in an epoch: penalties the governance-limit rules would not uphold.
-- Counted per rule first, then per host and epoch: one pass, no subquery correlated on (epoch, participant) (on
-- Citus a correlated subquery must join on escrow_id; docs/scale.md "The road to Citus").
SELECT 'disputable_penalty:' || epoch_index || ':' || participant AS alert_key,
       'warning' AS severity, participant, epoch_index,
       format('%s: %s disputable penalt%s in epoch %s (%s)', participant, sum(n)::bigint,
              CASE WHEN sum(n) = 1 THEN 'y' ELSE 'ies' END, epoch_index,
              string_agg(rule, ', ' ORDER BY rule)) AS summary,
       jsonb_build_object(
         'disputable_missed', sum(missed)::bigint,
         'disputable_invalid', sum(invalid)::bigint,
         'by_rule', jsonb_object_agg(rule, n),
         'first_detected_at', min(first_detected_at),
         -- how far the weakest escrow log behind them was verified (none, signed, replayed, settled)
         'evidence_level', fn.evidence_level(min(weakest))) AS details
FROM (SELECT epoch_index, participant, rule, count(*) AS n,
             count(*) FILTER (WHERE penalty = 'missed') AS missed,
             count(*) FILTER (WHERE penalty = 'invalid') AS invalid,
             min(detected_at) AS first_detected_at, min(fn.evidence_rank(evidence_level)) AS weakest
      FROM api.disputable_penalties
      GROUP BY epoch_index, participant, rule) per_rule
GROUP BY epoch_index, participant

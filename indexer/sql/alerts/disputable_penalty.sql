-- A host has disputable penalties in an epoch: penalties the governance-limit rules would not uphold.
SELECT 'disputable_penalty:' || epoch_index || ':' || participant AS alert_key,
       'warning' AS severity, participant, epoch_index,
       format('%s: %s disputable penalt%s in epoch %s (%s)', participant, count(*),
              CASE WHEN count(*) = 1 THEN 'y' ELSE 'ies' END, epoch_index,
              string_agg(DISTINCT rule, ', ' ORDER BY rule)) AS summary,
       jsonb_build_object(
         'disputable_missed', count(*) FILTER (WHERE penalty = 'missed'),
         'disputable_invalid', count(*) FILTER (WHERE penalty = 'invalid'),
         'by_rule', (SELECT jsonb_object_agg(rule, n) FROM (
                       SELECT d2.rule, count(*) AS n FROM api.disputable_penalties d2
                       WHERE d2.epoch_index = d.epoch_index AND d2.participant = d.participant
                       GROUP BY d2.rule) r),
         'first_detected_at', min(detected_at)) AS details
FROM api.disputable_penalties d
GROUP BY epoch_index, participant

-- A host's downtime (missed-request) test fails only because of disputable misses: without them it would pass.
SELECT 'downtime_by_disputable:' || epoch_index || ':' || participant AS alert_key,
       'critical' AS severity, participant, epoch_index,
       -- the test's total is inference_count + missed (CheckAndPunishForDowntime), not inference_count
       format('%s: downtime test fails in epoch %s only because of %s disputable miss(es) (%s missed of %s requests)',
              participant, epoch_index, disputable_missed, missed, inference_count + missed) AS summary,
       jsonb_build_object('missed', missed, 'disputable_missed', disputable_missed,
                          'inference_count', inference_count, 'reward_at_stake', reward_at_stake) AS details
FROM api.restitution_impact
WHERE downtime_passes = false AND downtime_passes_without_disputable = true

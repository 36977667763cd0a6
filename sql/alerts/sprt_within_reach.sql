-- The early warning hosts care about most: a host's invalidation SPRT log-likelihood ratio is within reach of its
-- threshold (at least 3/4 of it) while disputable invalidations are part of what pushed it there. It fires during
-- the epoch, as soon as the poller has seen the invalidations, not at settlement. Critical once the threshold is
-- crossed only because of the disputable invalidations.
SELECT 'sprt_within_reach:' || epoch_index || ':' || participant AS alert_key,
       CASE WHEN sprt_crossed AND NOT sprt_crossed_without_disputable THEN 'critical' ELSE 'warning' END AS severity,
       participant, epoch_index,
       format('%s: invalidation SPRT at %s of threshold %s in epoch %s; %s disputable invalidation(s) contribute '
              '(without them: %s)%s', participant, round(sprt_max_llr, 3), round(sprt_threshold, 3), epoch_index,
              disputable_invalid, round(sprt_max_llr_without_disputable, 3),
              CASE WHEN sprt_crossed AND NOT sprt_crossed_without_disputable
                   THEN '; crossed only because of them' ELSE '' END) AS summary,
       jsonb_build_object('sprt_max_llr', sprt_max_llr, 'sprt_threshold', sprt_threshold,
                          'sprt_max_llr_without_disputable', sprt_max_llr_without_disputable,
                          'sprt_crossed', sprt_crossed,
                          'sprt_crossed_without_disputable', sprt_crossed_without_disputable,
                          'invalid', invalid, 'disputable_invalid', disputable_invalid,
                          'inference_count', inference_count, 'reward_at_stake', reward_at_stake) AS details
FROM api.restitution_impact
WHERE disputable_invalid > 0
  AND sprt_threshold > 0
  AND sprt_max_llr IS NOT NULL
  AND sprt_max_llr * 4 >= sprt_threshold * 3
  AND sprt_max_llr_without_disputable IS DISTINCT FROM sprt_max_llr

-- A host served (or stated) more tokens than the governance limit allows: evidence of a raised local limit.
SELECT 'raised_limit_suspect:' || epoch_index || ':' || participant || ':' || model_id AS alert_key,
       'warning' AS severity, participant, epoch_index,
       format('%s: %s sign(s) of a local limit above governance %s for %s in epoch %s (up to %s tokens)',
              participant, count(*), max(governance_limit), model_id, epoch_index, max(observed_tokens)) AS summary,
       jsonb_build_object('model_id', model_id, 'governance_limit', max(governance_limit),
                          'max_observed_tokens', max(observed_tokens),
                          'evidence_kinds', jsonb_agg(DISTINCT evidence_kind),
                          'examples', (jsonb_agg(jsonb_build_object('escrow_id', escrow_id,
                                                                   'inference_id', inference_id,
                                                                   'observed_tokens', observed_tokens)
                                                 ORDER BY observed_tokens DESC) -> 0)) AS details
FROM api.raised_limit_suspects
GROUP BY epoch_index, participant, model_id

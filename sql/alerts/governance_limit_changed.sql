-- A model's governance --max-model-len differs from the previous epoch's (including becoming known or unknown).
SELECT 'governance_limit_changed:' || model_id || ':' || epoch_index AS alert_key,
       'info' AS severity, NULL::text AS participant, epoch_index,
       format('%s: governance limit %s in epoch %s (was %s in epoch %s)', model_id,
              coalesce(governance_limit::text, 'unknown'), epoch_index,
              coalesce(previous_limit::text, 'unknown'), previous_epoch) AS summary,
       jsonb_build_object('model_id', model_id, 'governance_limit', governance_limit,
                          'previous_limit', previous_limit, 'previous_epoch', previous_epoch,
                          'limit_source', limit_source, 'model_args', model_args) AS details
FROM (SELECT m.*, lag(governance_limit) OVER w AS previous_limit, lag(epoch_index) OVER w AS previous_epoch
      FROM api.model_limits m
      WINDOW w AS (PARTITION BY model_id ORDER BY epoch_index)) x
WHERE previous_epoch IS NOT NULL AND governance_limit IS DISTINCT FROM previous_limit

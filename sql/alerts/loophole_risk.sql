-- Model args that carry --max-model-len more than once or in both forms (the MergeModelArgs loophole, #1911):
-- which value vLLM runs with depends on the order the host's args are merged in.
SELECT 'loophole_risk:' || model_id || ':' || epoch_index AS alert_key,
       'warning' AS severity, NULL::text AS participant, epoch_index,
       format('%s: model args in epoch %s carry --max-model-len %s time(s)%s', model_id, epoch_index,
              flag_occurrences, CASE WHEN mixed_forms THEN ' in both forms' ELSE '' END) AS summary,
       jsonb_build_object('model_id', model_id, 'governance_limit', governance_limit,
                          'flag_occurrences', flag_occurrences, 'mixed_forms', mixed_forms,
                          'model_args', model_args) AS details
FROM api.model_limits
WHERE loophole_risk

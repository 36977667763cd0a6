-- A source whose latest attempt failed (its last error is newer than its last success).
SELECT 'source_erroring:' || source AS alert_key,
       'warning' AS severity, NULL::text AS participant,
       CASE WHEN source_kind = 'epoch' THEN source_key::bigint END AS epoch_index,
       format('%s: %s', source, left(last_error, 300)) AS summary,
       jsonb_build_object('source', source, 'last_error', last_error, 'last_error_at', last_error_at,
                          'last_success_at', last_success_at, 'next_retry_at', next_retry_at) AS details
FROM api.ingest_status
WHERE last_error IS NOT NULL AND (last_success_at IS NULL OR last_error_at > last_success_at)

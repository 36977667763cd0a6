-- A source the poller still follows has not succeeded for 15 minutes (the default --ready-max-lag), or its cursor
-- has not moved for consecutive cycles while the source is ahead (the progress watchdog: stalled).
SELECT 'ingest_lagging:' || source AS alert_key,
       CASE WHEN stalled_cycles > 0 OR lag_seconds > 3600 THEN 'critical' ELSE 'warning' END AS severity,
       NULL::text AS participant,
       CASE WHEN source_kind = 'epoch' THEN source_key::bigint END AS epoch_index,
       format('%s: %s', source,
              CASE WHEN stalled_cycles > 0 THEN format('stalled for %s cycle(s) at %s (source at %s)',
                                                        stalled_cycles, cursor, source_position)
                   ELSE format('no success for %s s', round(lag_seconds::numeric)) END) AS summary,
       jsonb_build_object('source', source, 'cursor', cursor, 'lag_seconds', round(lag_seconds::numeric),
                          'stalled_cycles', stalled_cycles, 'source_position', source_position,
                          'last_success_at', last_success_at) AS details
FROM api.ingest_status
WHERE lag_seconds > 900 OR stalled_cycles > 0

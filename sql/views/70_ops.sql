-- Fetch failures for the ingest-health dashboard: one row per failure the poller recorded (net.failure), without
-- the URL (operators read it in the logs; a dashboard viewer does not need the hosts' addresses).
CREATE VIEW api.source_errors AS
SELECT id, source, source_kind AS source_class, source_key, error, transient, at
FROM net.failure;

-- 0/0 Finishes stored without their response payload (net.awaited_payload, indexer.poller.awaited): 'awaited' ones
-- are asked again each cycle with a growing backoff; 'given_up' ones were not served by the last allowed attempt
-- and are never asked again (their refusal_kind stays unknown). A payload obtained loads into its Finish and its row
-- goes. The claim columns (which poller is asking now) are internal.
CREATE VIEW api.awaited_payloads AS
SELECT escrow_id, inference_id, epoch_index,
       CASE WHEN given_up_at IS NULL THEN 'awaited' ELSE 'given_up' END AS state,
       attempts, first_missed_at, last_attempt_at,
       CASE WHEN given_up_at IS NULL THEN next_attempt_at END AS next_attempt_at,
       given_up_at, last_error
FROM net.awaited_payload;

-- Fetch failures for the ingest-health dashboard: one row per failure the poller recorded (net.failure), without
-- the URL (operators read it in the logs; a dashboard viewer does not need the hosts' addresses).
CREATE VIEW api.source_errors AS
SELECT id, source, split_part(source, ':', 1) AS source_class, error, transient, at
FROM net.failure;

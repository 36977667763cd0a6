-- Fetch failures for the ingest-health dashboard: one row per failure the poller recorded (net.failure), without
-- the URL (operators read it in the logs; a dashboard viewer does not need the hosts' addresses).
CREATE VIEW api.source_errors AS
SELECT id, source, source_kind AS source_class, source_key, error, transient, at
FROM net.failure;

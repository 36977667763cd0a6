-- api.ingest_status: poller progress per source (chain, epochs, escrow:<id> logs), for dashboards and alerting.
CREATE VIEW api.ingest_status AS
SELECT c.source, c.cursor, c.last_success_at, c.last_error, c.last_error_at, c.next_retry_at, c.updated_at,
       EXTRACT(EPOCH FROM (now() - c.last_success_at))::double precision AS lag_seconds
FROM net.cursor c;

-- api.ingest_status: poller progress per source: 'chain' (cursor = current epoch), 'epoch:<E>', 'escrow:<id>'
-- (cursor = last ingested diff nonce), 'escrow-final:<id>' (settled log complete; never fetched again).
-- lag_seconds is null for sources that are finished (a final escrow's log), so alerting can use it directly.
-- (no percent signs in this file: it runs through a DB-API driver with paramstyle pyformat)
CREATE VIEW api.ingest_status AS
SELECT c.source, c.cursor, c.last_success_at, c.last_error, c.last_error_at, c.next_retry_at, c.updated_at,
       CASE WHEN starts_with(c.source, 'escrow-final:') OR (starts_with(c.source, 'escrow:') AND EXISTS (
                SELECT 1 FROM net.cursor f WHERE f.source = 'escrow-final:' || substr(c.source, 8)))
            THEN NULL
            ELSE EXTRACT(EPOCH FROM (now() - COALESCE(c.last_success_at, c.updated_at)))::double precision
       END AS lag_seconds
FROM net.cursor c;

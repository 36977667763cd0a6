-- api.ingest_status: poller progress per source: 'chain' (cursor = current epoch), 'epoch:<E>' (cursor = the
-- epoch's finality state: open, settling or final), 'escrow:<id>' (cursor = last ingested diff nonce),
-- 'escrow-final:<id>' (settled log complete; never fetched again).
-- lag_seconds is null for sources that are finished (a final escrow's log, a final epoch), so alerting can use it
-- directly. stalled_cycles > 0: the source is ahead of the cursor and the cursor has not moved for that many
-- consecutive cycles (last_error says so once the watchdog's threshold is reached).
-- 'snapshot:<E>:<what>[:<model or participant>]': a chain read of epoch E's snapshot (root group, a model's
-- group, params, exclusions, a participant's performance summary); last_error is set while it fails, and
-- epoch_index, model_id, participant, host and url name the failed read.
-- (no percent signs in this file: it runs through a DB-API driver with paramstyle pyformat)
CREATE VIEW api.ingest_status AS
SELECT c.source, c.cursor, c.last_success_at, c.last_error, c.last_error_at, c.next_retry_at, c.updated_at,
       CASE WHEN c.source_kind = 'escrow-final' OR (c.source_kind = 'escrow' AND EXISTS (
                SELECT 1 FROM net.cursor f WHERE f.source_kind = 'escrow-final' AND f.source_key = c.source_key))
              OR (c.source_kind = 'epoch' AND c.cursor = 'final')
            THEN NULL
            ELSE EXTRACT(EPOCH FROM (now() - COALESCE(c.last_success_at, c.updated_at)))::double precision
       END AS lag_seconds,
       COALESCE(p.stalled_cycles, 0) AS stalled_cycles,
       p.source_position,
       f.epoch_index, f.model_id, f.participant, f.host, f.url AS failed_url,
       c.source_kind, c.source_key
FROM net.cursor c
LEFT JOIN net.progress p ON p.source = c.source
LEFT JOIN net.snapshot_failure f ON f.source = c.source;

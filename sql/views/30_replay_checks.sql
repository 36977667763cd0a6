-- api.replay_rejections: txs the state machine would not apply, with the reason.
CREATE VIEW api.replay_rejections AS
SELECT r.escrow_id, e.epoch_index, r.diff_nonce, r.kind, r.inference_id, r.slot, r.reason, r.ignored
FROM replay.rejected_tx r LEFT JOIN rec.escrow e USING (escrow_id);

-- api.host_stats_check: per slot, the replay's counters beside the network's reported host_stats.
CREATE VIEW api.host_stats_check AS
SELECT COALESCE(r.escrow_id, h.escrow_id) AS escrow_id,
       COALESCE(r.slot_id, h.slot_id) AS slot_id,
       r.participant,
       r.missed AS replay_missed, h.missed AS reported_missed,
       r.invalid AS replay_invalid, h.invalid AS reported_invalid,
       (h.slot_id IS NOT NULL AND (r.missed IS DISTINCT FROM h.missed OR r.invalid IS DISTINCT FROM h.invalid))
           AS mismatch
FROM replay.slot_stats r
FULL JOIN rec.host_stats h ON h.escrow_id = r.escrow_id AND h.slot_id = r.slot_id;

-- api.quarantine: rejected input lines with file and line, for operators; a line a later valid record superseded
-- stays, resolved, with the line that resolved it (indexer.load.resolved).
CREATE VIEW api.quarantine AS
SELECT s.uri AS source, s.digest AS source_digest, q.line, q.kind, q.reason, q.quarantined_at,
       q.resolved_at, r.uri || ':' || q.resolved_line AS resolved_by
FROM rec.quarantine q JOIN rec.source s USING (source_id)
LEFT JOIN rec.source r ON r.source_id = q.resolved_source_id;

-- api.escrow_verification: per escrow, how far its log was verified the way the protocol signs it (indexer.verify):
-- none < signed < replayed < settled, with the first check that did not pass. An escrow not yet verified is `none`
-- with verified_at NULL.
CREATE VIEW api.escrow_verification AS
SELECT e.escrow_id, e.epoch_index,
       COALESCE(v.level, 'none') AS level,
       COALESCE(v.nonces_checked, 0) AS nonces_checked,
       v.failed_check, v.failed_nonce, v.failure, v.source_host, v.protocol_version,
       COALESCE(v.settlement_tx_hash, s.tx_hash) AS settlement_tx_hash,
       COALESCE(v.settlement_height, s.height) AS settlement_height,
       v.verified_at,
       COALESCE(v.crashes, 0) AS crashes, v.retry_after
FROM rec.escrow e
LEFT JOIN replay.escrow_verification v USING (escrow_id)
LEFT JOIN rec.settlement s ON s.escrow_id = e.escrow_id;

-- An escrow whose log failed a verification check (api.escrow_verification.failed_check): txs the user did not sign
-- (signed), state roots the replay does not reproduce (replayed), or a final root the chain did not settle or a
-- settlement without its hosts' quorum (settled), or tx records that contradict the verified log (records). Findings
-- on that escrow rest on a log, or on records, not shown to be the real one.
-- A row where the verifier itself raised (failure starting 'the verifier failed: ', no check named,
-- indexer.replay.verification.VERIFIER_FAILED) is a warning: nothing was shown either way, and a verifier fix
-- re-checks it. One alert per escrow; it resolves when the escrow passes (failed_check NULL). The summary is one
-- line with the escrow id and the reason bounded (both can carry a peer's text; a long id keeps a digest so keys
-- stay distinct); each channel escapes it (indexer.alerts.messages).
SELECT 'escrow_verification_failed:' || t.escrow AS alert_key,
       CASE WHEN v.failed_check IS NULL THEN 'warning' ELSE 'critical' END AS severity,
       NULL::text AS participant, v.epoch_index,
       format('escrow %s (epoch %s) %s%s: %s', t.escrow, COALESCE(v.epoch_index::text, 'unknown'),
              COALESCE('failed the ' || v.failed_check || ' check', 'could not be verified'),
              COALESCE(' at nonce ' || v.failed_nonce, ''),
              CASE WHEN length(t.reason) > 300 THEN left(t.reason, 299) || '…'
                   ELSE COALESCE(NULLIF(t.reason, ''), 'no reason recorded') END) AS summary,
       jsonb_build_object('escrow_id', left(v.escrow_id, 1000), 'check', v.failed_check, 'nonce', v.failed_nonce,
                          'reason', left(v.failure, 2000), 'level', v.level, 'source_host', left(v.source_host, 300),
                          'protocol_version', left(v.protocol_version, 100), 'verified_at', v.verified_at) AS details
FROM api.escrow_verification v
CROSS JOIN LATERAL (
  SELECT CASE WHEN length(v.escrow_id) <= 100 THEN v.escrow_id
              ELSE left(v.escrow_id, 60) || '…' || md5(v.escrow_id) END AS escrow,
         btrim(regexp_replace(v.failure, '[[:space:][:cntrl:]]+', ' ', 'g')) AS reason
) t
WHERE v.failed_check IS NOT NULL OR starts_with(v.failure, 'the verifier failed: ')

-- An epoch left the chain's pruning window before the poller captured all its escrows (reason 'pruned': some
-- escrows never final; 'missed': the poller never saw the epoch at all). That data is gone from the network.
SELECT 'escrow_pruned_before_capture:' || epoch_index AS alert_key,
       'critical' AS severity, NULL::text AS participant, epoch_index,
       CASE WHEN reason = 'missed'
            THEN format('epoch %s was pruned before the poller saw it', epoch_index)
            ELSE format('epoch %s pruned with %s of %s escrow(s) not captured to the end', epoch_index,
                        escrows - escrows_final, escrows) END AS summary,
       jsonb_build_object('reason', reason, 'escrows', escrows, 'escrows_final', escrows_final,
                          'final_at', final_at) AS details
FROM net.epoch_state
WHERE state = 'final' AND (reason = 'missed' OR (reason = 'pruned' AND escrows_final < escrows))

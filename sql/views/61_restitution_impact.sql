-- Restitution impact (docs/restitution.md): per host and epoch, what it would have been paid had it passed and
-- what to restitute, on the outcomes of api.restitution_outcomes (60_restitution.sql).

-- Per host and epoch: the observed counts (the chain's epoch_performance_summary when captured, else the
-- replay's), the disputable ones, each test with and without them, the observed exclusion and the reward at stake
-- (theoretical epoch reward x reward_weight / total_weight, fn.reward_share; reward_weight is the effective weight
-- after the chain's power cap, fn.power_cap). evidence says how each number was obtained and what it does not
-- include.
CREATE VIEW api.restitution_impact AS
WITH pair AS (
  SELECT o.*, w.downtime_passes AS downtime_passes_without, w.sprt_max_llr AS sprt_max_llr_without,
         w.sprt_crossed AS sprt_crossed_without, w.sprt_crossed_at_escrow AS sprt_crossed_at_escrow_without,
         w.downtime_missed AS downtime_missed_without, w.downtime_p0 AS downtime_p0_without,
         w.excused_missed AS disputable_missed, w.excused_invalid AS disputable_invalid,
         w.evidence_level AS disputable_evidence_level
  FROM api.restitution_outcomes o
  JOIN api.restitution_outcomes w ON w.epoch_index = o.epoch_index AND w.participant = o.participant
                                 AND w.variant = 'without_disputable'
  WHERE o.variant = 'current'
), priced AS (
  SELECT p.*, r.reward AS theoretical_epoch_reward, r.error AS reward_error, r.chain_error AS reward_chain_error,
         rw.reward_weight AS effective_weight, rw.weight_basis, rw.error AS effective_weight_error,
         -- in the list the chain caps (CalculateParticipantBitcoinRewardsWithTransfers): a validation weight > 0
         -- and status ACTIVE: not excluded, and not of another status (INACTIVE, INVALID, RAMPING, …) as read at
         -- the epoch's end; a status not read counts as ACTIVE (epoch_caps says when a read failed); a host that
         -- fails the downtime test at settlement is still in it
         p.weight > 0 AND p.excluded_reason IS NULL AND COALESCE(p.participant_status = 'ACTIVE', true)
           AS in_cap_list,
         CASE WHEN p.weight IS NOT NULL AND p.total_weight IS NOT NULL AND r.reward IS NOT NULL
              THEN fn.reward_share(r.reward, greatest(p.weight, 0), p.total_weight) END AS reward_if_full_weight,
         (p.downtime_passes = false AND p.downtime_passes_without = true) AS downtime_flips,
         -- the chain excluded the host for statistical_invalidations, some of its invalidations are disputable,
         -- and the replayed SPRT crosses neither with nor without them: the exclusion is not reproduced (the
         -- consecutive-failures rule is not modelled, or counts are missing), so whether removing the disputable
         -- invalidations changes the outcome is unknown (NULL), not false
         CASE WHEN p.sprt_crossed = false AND p.sprt_crossed_without = false AND p.disputable_invalid > 0
                   AND p.excluded_reason IS NOT DISTINCT FROM 'statistical_invalidations' THEN NULL
              ELSE (p.sprt_crossed = true AND p.sprt_crossed_without = false) END AS sprt_flips,
         p.sprt_crossed = false AND p.excluded_reason IS NOT DISTINCT FROM 'statistical_invalidations'
           AS exclusion_not_reproduced,
         -- the chain had the host INACTIVE at the epoch's end (its in-epoch downtime SPRT, InactiveLLR, which the
         -- indexer does not model: docs/chain-math.md), some of its misses are disputable, and the settlement's
         -- downtime test does not flip: whether the disputable misses made it INACTIVE is unknown (NULL), not false
         p.participant_status IS NOT DISTINCT FROM 'INACTIVE' AND p.disputable_missed > 0
           AND (p.downtime_passes = false AND p.downtime_passes_without = true) IS NOT TRUE
           AS inactive_not_reproduced,
         fn.chain_decimal(dp.delegation_params -> 'delegation_share') AS delegation_share
  FROM pair p
  LEFT JOIN rec.epoch_params dp ON dp.epoch_index = p.epoch_index
  CROSS JOIN LATERAL fn.theoretical_epoch_reward_safe(p.epoch_index, p.bitcoin_reward_params, p.chain_version) r
  CROSS JOIN LATERAL fn.reward_weight(p.weight, p.confirmation_weight, p.raw_confirmation_weight,
                                      p.confirmation_weight_scales, p.chain_version) rw
), cap_lists AS (  -- per epoch: the effective weights of the ACTIVE hosts, and whether every host is known
  SELECT epoch_index, max(chain_version) AS cap_chain_version,
         COALESCE(array_agg(effective_weight ORDER BY participant) FILTER (WHERE in_cap_list), '{}') AS cap_list,
         min(participant || ': ' || COALESCE(effective_weight_error, 'unknown'))
           FILTER (WHERE in_cap_list AND effective_weight IS NULL) AS cap_unknown_host,
         sum(greatest(weight, 0)) AS captured_weight
  FROM priced GROUP BY epoch_index
), epoch_caps AS (
  -- the list holds the hosts not excluded, so it is known only when the chain's exclusions were read: a failed
  -- excluded_participants read (net.snapshot_failure, until a later read succeeds) leaves every host's
  -- excluded_reason NULL, which would put the excluded hosts' weights in the list. Epochs loaded from files have no
  -- such row: their participant_epoch records carry the exclusions as captured.
  SELECT l.*, c.capped AS epoch_capped, c.cap AS epoch_cap, c.rule AS epoch_cap_rule,
         CASE WHEN x.error IS NOT NULL THEN 'the chain''s exclusions of the epoch were not read (excluded_participants: '
                || left(x.error, 200) || '), so which hosts are ACTIVE, and the list the chain caps, is not known'
              WHEN xs.error IS NOT NULL THEN 'a participant''s status at the epoch''s end was not read ('
                || left(xs.error, 200) || '), so which hosts are ACTIVE, and the list the chain caps, is not known'
              WHEN l.cap_unknown_host IS NOT NULL THEN 'the effective weight of an ACTIVE host of the epoch is '
                || 'unknown (' || l.cap_unknown_host || ')'
              WHEN l.captured_weight IS DISTINCT FROM t.total_weight THEN 'the captured hosts'' weights sum to '
                || COALESCE(l.captured_weight::text, 'nothing') || ' but the epoch''s total_weight is '
                || COALESCE(t.total_weight::text, 'not captured') || ': a host of the epoch is missing, so the '
                || 'list of ACTIVE weights the chain caps is not known'
              ELSE c.error END AS epoch_cap_error
  FROM cap_lists l
  LEFT JOIN rec.epoch_params t ON t.epoch_index = l.epoch_index
  LEFT JOIN LATERAL (SELECT f.error FROM net.snapshot_failure f WHERE f.epoch_index = l.epoch_index
                       AND f.what = 'excluded' ORDER BY f.source LIMIT 1) x ON true
  LEFT JOIN LATERAL (SELECT f.error FROM net.snapshot_failure f WHERE f.epoch_index = l.epoch_index
                       AND f.what = 'status' ORDER BY f.source LIMIT 1) xs ON true
  CROSS JOIN LATERAL fn.power_cap(l.cap_list, l.cap_chain_version) c
), restorable AS (
  -- hosts outside the list the chain capped because of an SPRT crossing the disputable invalidations caused:
  -- excluded for statistical_invalidations (or left INVALID) with sprt_flips. Without the disputable penalties they
  -- would all have been ACTIVE together, so each one's weight is in every other host's counterfactual list
  -- (certain); a host with disputable invalidations whose flip is undecided (sprt_flips NULL) may or may not be
  -- (certain = false); a host with none known is not
  SELECT epoch_index, participant, effective_weight, sprt_flips IS TRUE AS certain
  FROM priced
  WHERE in_cap_list IS FALSE AND (effective_weight > 0 OR effective_weight IS NULL)  -- unknown: the cap is unknown
    AND (sprt_flips OR (sprt_flips IS NULL AND disputable_invalid > 0))
    AND (excluded_reason = 'statistical_invalidations'
         OR (excluded_reason IS NULL AND participant_status = 'INVALID'))
), capped AS (
  -- the cap of the epoch without the disputable penalties: the chain's list, the restorable hosts added (all of them
  -- at once: the chain caps one list), and for a host outside the list the host itself (had it passed it would have
  -- been ACTIVE). Where an undecided host would change that cap, the cap is unknown. paid_*: the cap as the chain
  -- applied it (the epoch's list), which is what it paid the hosts in the list on
  SELECT q.*, x.rule AS cap_rule, x.capped AS cap_applies, x.cap AS power_cap,
         k.epoch_capped AS paid_cap_applies, k.epoch_cap AS paid_cap, k.epoch_cap_error AS paid_cap_error,
         o.restored_hosts, o.undecided_hosts,
         CASE WHEN q.effective_weight IS NULL THEN NULL
              WHEN k.epoch_cap_error IS NOT NULL THEN k.epoch_cap_error
              WHEN o.unknown_host IS NOT NULL THEN 'the effective weight of ' || o.unknown_host || ', which the '
                || 'disputable penalties excluded (it would have been ACTIVE without them), is unknown'
              WHEN x.error IS NOT NULL THEN x.error
              WHEN o.undecided_hosts IS NOT NULL AND y.error IS NOT NULL THEN y.error
              WHEN o.undecided_hosts IS NOT NULL AND (x.capped, x.cap) IS DISTINCT FROM (y.capped, y.cap)
                THEN 'whether ' || array_to_string(o.undecided_hosts, ', ') || ' would have been ACTIVE without the '
                  || 'disputable penalties is undecided, and the cap differs: '
                  || CASE WHEN y.capped THEN y.cap::text ELSE 'none' END || ' with, '
                  || CASE WHEN x.capped THEN x.cap::text ELSE 'none' END || ' without' END AS power_cap_error
  FROM priced q
  JOIN epoch_caps k ON k.epoch_index = q.epoch_index
  CROSS JOIN LATERAL (
    SELECT COALESCE(array_agg(r.effective_weight ORDER BY r.participant) FILTER (WHERE r.certain), '{}') AS certain_w,
           COALESCE(array_agg(r.effective_weight ORDER BY r.participant) FILTER (WHERE NOT r.certain), '{}') AS maybe_w,
           array_agg(r.participant ORDER BY r.participant) FILTER (WHERE r.certain) AS restored_hosts,
           array_agg(r.participant ORDER BY r.participant) FILTER (WHERE NOT r.certain) AS undecided_hosts,
           min(r.participant) FILTER (WHERE r.effective_weight IS NULL) AS unknown_host
    FROM restorable r WHERE r.epoch_index = q.epoch_index AND r.participant <> q.participant) o
  CROSS JOIN LATERAL (
    SELECT k.cap_list || o.certain_w || CASE WHEN NOT q.in_cap_list AND q.effective_weight > 0
                                             THEN ARRAY[q.effective_weight] ELSE '{}'::bigint[] END AS cf_list) l
  CROSS JOIN LATERAL fn.power_cap(l.cf_list, q.chain_version) x
  CROSS JOIN LATERAL fn.power_cap(CASE WHEN cardinality(o.maybe_w) > 0 THEN l.cf_list || o.maybe_w END,
                                  q.chain_version) y
), weighed AS (
  SELECT c.*,
         -- the weight the chain pays on: the effective weight, at most the cap (a weight <= 0 pays nothing,
         -- whatever the cap); reward_weight without the disputable penalties, paid_weight as the chain paid (a host
         -- outside its list was paid on nothing)
         CASE WHEN effective_weight <= 0 THEN 0
              WHEN power_cap_error IS NULL AND cap_applies THEN least(effective_weight, power_cap)
              WHEN power_cap_error IS NULL THEN effective_weight END AS reward_weight,
         CASE WHEN NOT in_cap_list OR effective_weight <= 0 THEN 0
              WHEN paid_cap_error IS NULL AND paid_cap_applies THEN least(effective_weight, paid_cap)
              WHEN paid_cap_error IS NULL THEN effective_weight END AS paid_weight,
         COALESCE(effective_weight_error,
                  CASE WHEN effective_weight > 0 THEN 'power cap: ' || power_cap_error END) AS reward_weight_error
  FROM capped c
), paid AS (
  SELECT w.*,
         CASE WHEN reward_weight IS NOT NULL AND total_weight IS NOT NULL AND theoretical_epoch_reward IS NOT NULL
              THEN fn.reward_share(theoretical_epoch_reward, reward_weight, total_weight) END AS reward_if_passed,
         -- what the chain's rule paid the host in the epoch as it happened (CalculateParticipantBitcoinRewards): a
         -- host excluded, of a status other than ACTIVE or of weight <= 0 gets nothing, a host failing the downtime
         -- test has its weight zeroed after the cap, every other host its share on paid_weight
         CASE WHEN excluded_reason IS NOT NULL OR participant_status <> 'ACTIVE' OR weight <= 0 THEN 0
              WHEN downtime_passes = false THEN 0
              WHEN downtime_passes THEN paid_share END AS payout_by_rule
  FROM (SELECT w.*,  -- the share on the weight as paid, for a host that passed
               CASE WHEN paid_weight IS NOT NULL AND total_weight IS NOT NULL AND theoretical_epoch_reward IS NOT NULL
                    THEN fn.reward_share(theoretical_epoch_reward, paid_weight, total_weight) END AS paid_share
        FROM weighed w) w
), judged AS (
  SELECT q.*, COALESCE(chain_rewarded_coins, payout_by_rule) AS paid_before,
         -- a flip in either test decides; otherwise a test that could not be evaluated leaves the answer unknown
         CASE WHEN downtime_flips OR sprt_flips THEN true
              WHEN downtime_flips IS NULL OR sprt_flips IS NULL OR inactive_not_reproduced THEN NULL
              ELSE false END AS candidate,
         concat_ws('; ',
           CASE WHEN inactive_not_reproduced THEN 'participant status: the chain had the host INACTIVE at the '
             || 'epoch''s end (its in-epoch downtime test, InactiveLLR, which the indexer does not model), and '
             || disputable_missed || ' of its misses are disputable: whether they made it INACTIVE is not shown' END,
           CASE WHEN (downtime_flips OR sprt_flips)
                     AND excluded_reason NOT IN ('statistical_invalidations', 'failed_confirmation_poc')
             THEN 'the chain excluded the host for ' || left(excluded_reason, 100) || ', which the indexer does '
               || 'not know to follow from the disputable penalties or not: whether it would have been paid is not '
               || 'known' END,
           CASE WHEN (downtime_flips OR sprt_flips) AND excluded_reason IS NULL
                     AND participant_status NOT IN ('ACTIVE', 'INVALID', 'INACTIVE')
             THEN 'the chain had the host as ' || left(participant_status, 100) || ' at the epoch''s end, a status '
               || 'the indexer does not know to follow from the disputable penalties or not: whether it would have '
               || 'been paid is not known' END,
           CASE WHEN (downtime_flips OR sprt_flips) AND chain_rewarded_coins IS NULL AND payout_by_rule IS NULL
             THEN 'what the chain paid the host is not known (no rewarded_coins captured, and the rule''s payout '
               || 'needs the downtime test and the reward weight), so what is still owed is not known' END,
           CASE WHEN downtime_flips IS NULL THEN 'downtime test: ' || COALESCE(downtime_null_reason,
             'not evaluable with or without the disputable penalties') END,
           CASE WHEN sprt_flips IS NULL AND exclusion_not_reproduced THEN 'invalidation SPRT: the chain excluded '
             || 'the host for statistical_invalidations but the replayed test does not cross (max LLR '
             || round(sprt_max_llr, 2) || ' < H ' || sprt_threshold || '; without the disputable penalties '
             || round(sprt_max_llr_without, 2) || '): the exclusion is not reproduced (the consecutive-failures '
             || 'rule, which the indexer does not model, or counts the indexer lacks), so its cause is not shown '
             || 'to be the disputable invalidations'
                WHEN sprt_flips IS NULL THEN 'invalidation SPRT: ' || COALESCE(sprt_null_reason,
             'not evaluable with or without the disputable penalties') END) AS unknown_reason
  FROM paid q
), owed AS (
  SELECT j.*,
         -- paid only when the host passes both tests without the disputable penalties (a flip in one test does
         -- not pay a host the other test still fails)
         -- not paid twice: less what the host was paid (the chain's rewarded_coins, else the rule's payout), at
         -- least 0; either unknown: unknown (greatest() would skip a NULL)
         CASE WHEN candidate = false THEN 0
              WHEN candidate AND (downtime_passes_without = false OR sprt_crossed_without) THEN 0
              -- excluded for a reason the disputable penalties do not cause: excluded (paid nothing) without them
              WHEN candidate AND excluded_reason = 'failed_confirmation_poc' THEN 0
              WHEN candidate AND excluded_reason <> 'statistical_invalidations' THEN NULL
              -- INACTIVE at the end comes from the in-epoch downtime test; with no disputable miss it stays, unpaid
              WHEN candidate AND excluded_reason IS NULL AND participant_status = 'INACTIVE' AND disputable_missed = 0
                THEN 0
              WHEN candidate AND excluded_reason IS NULL
                   AND participant_status NOT IN ('ACTIVE', 'INVALID', 'INACTIVE') THEN NULL
              WHEN candidate AND downtime_passes_without AND sprt_crossed_without = false
                THEN CASE WHEN reward_if_passed - paid_before < 0 THEN 0 ELSE reward_if_passed - paid_before END
              END AS amount
  FROM judged j
), delegated AS (
  SELECT o.*,
         -- the amount if the host delegated one model: its reward weight less delegation_share of it
         CASE WHEN amount > 0 THEN (SELECT CASE WHEN d.owed < 0 THEN 0 ELSE d.owed END
                FROM (SELECT fn.reward_share(theoretical_epoch_reward, fn.delegated_reward_weight(reward_weight,
                             delegation_share), total_weight) - paid_before AS owed) d) END
           AS amount_if_delegating
  FROM owed o
)
SELECT epoch_index, participant,
       COALESCE(chain_inference_count, assigned - replay_missed) AS inference_count,
       COALESCE(chain_missed, replay_missed) AS missed,
       COALESCE(chain_invalid, replay_invalid) AS invalid,
       COALESCE(chain_validated, replay_validated) AS validated,
       disputable_missed, disputable_invalid,
       downtime_passes, downtime_passes_without AS downtime_passes_without_disputable,
       sprt_max_llr, sprt_max_llr_without AS sprt_max_llr_without_disputable, sprt_threshold,
       sprt_crossed, sprt_crossed_without AS sprt_crossed_without_disputable,
       excluded_reason, participant_status, confirmation_weight, total_weight, theoretical_epoch_reward,
       reward_if_passed AS reward_at_stake,
       candidate AS restitution_candidate, weight_basis, reward_if_passed, amount AS restitution_amount,
       NULLIF(unknown_reason, '') AS unknown_reason, exclusion_not_reproduced,
       weight, raw_confirmation_weight, reward_weight, reward_weight_error, effective_weight,
       CASE WHEN power_cap_error IS NULL AND cap_applies THEN power_cap END AS power_cap,
       confirmation_weight = 0 AND weight > 0 AS zero_confirmation_weight, reward_if_full_weight,
       chain_rewarded_coins,
       -- the power cap (fn.power_cap) lowered this host's weight; NULL when the capped weight is unknown
       reward_weight < effective_weight AS power_cap_may_bind,
       -- the rule checked against the chain: for a host the chain paid, the payout equals reward_if_passed
       -- (a host the chain paid was ACTIVE and passed the downtime test: its payout is the share on paid_weight)
       CASE WHEN chain_rewarded_coins > 0 AND paid_share IS NOT NULL
            THEN chain_rewarded_coins = paid_share END AS payout_matches_rule,
       CASE WHEN sprt_flips AND downtime_flips THEN 'sprt_and_downtime' WHEN sprt_flips THEN 'sprt'
            WHEN downtime_flips THEN 'downtime' END AS flipped_test,
       CASE WHEN summary_captured THEN 'chain' ELSE 'replay' END AS counts_source,
       replay_missed, replay_invalid, replay_validated, excluded_height,
       (excluded_reason IS NOT DISTINCT FROM 'statistical_invalidations') = sprt_crossed AS exclusion_matches_sprt,
       sprt_p0, sprt_p1, binom_test_p0, downtime_p0, sprt_final_llr, sprt_crossed_at_escrow,
       chain_version, version_source AS chain_version_source, params_exact, params_height,
       params_changed_by_next_epoch, delegation_share,
       amount_if_delegating AS restitution_amount_if_delegating,
       fn.delegation_status(chain_version, amount, delegation_share, amount_if_delegating) AS delegation_status,
       jsonb_strip_nulls(jsonb_build_object(
         'sprt_order', 'one status update per escrow settlement (the chain adds an escrow''s results at once and '
           || 'checks LLR >= H after each); escrows in settlement order: settled_height when recorded, else escrow '
           || 'id (creation order), so an escrow created earlier but settled later is misordered',
         'sprt_settle_heights_known', settle_heights_known,
         'escrows_settled_after_epoch', CASE WHEN escrows_settled_late IS NOT NULL THEN jsonb_build_object(
             'escrows', to_jsonb(escrows_settled_late),
             'rule', 'settled after the epoch''s last block: the chain paid them but added nothing to the epoch''s '
               || 'counters (MsgSettleDevshardEscrow treatAsCurrentEpochSettle), so they are not SPRT steps here') END,
         'sprt_escrows', to_jsonb(escrows),
         'sprt_crossed_at_escrow', sprt_crossed_at_escrow,
         'sprt_crossed_at_escrow_without_disputable', sprt_crossed_at_escrow_without,
         'sprt_null_reason', sprt_null_reason,
         'pass_count', 'validated += assigned - missed - invalid per settled escrow (chain v0.2.12 on), assigned = '
           || 'devshardAssignedUpperBoundForSlot(settle nonce) over the host''s slots (fn.devshard_assigned_upper_bound)'
           || CASE WHEN assigned_from_settle_nonce IS NOT FALSE THEN '' ELSE '; some escrows lack the settled nonce: for them the '
           || 'indexer counts the host''s replayed inferences, fewer than the chain''s bound' END,
         'assigned_from_settle_nonce', assigned_from_settle_nonce,
         'pass_count_policy', jsonb_build_object(
             'flags', pass_count_flags,
             'note', 'passes here are assigned - missed - invalid (policy DERIVED); chain revisions with per-name '
               || 'pass-count policies (v0.2.16 on) credit a SAMPLED protocol name, when its flag applies it, '
               || 'min(validated, 2 * min(finished, completed) * validation_rate_bps / 10000 + 2) per slot '
               || '(fn.devshard_sampled_passes); the policy store is not captured',
             'flags_unknown', CASE WHEN pass_count_flags IS NULL
               THEN 'no devshard_escrow_params snapshot captured for the epoch' END),
         'replay_counts', jsonb_build_object('assigned', assigned, 'missed', replay_missed,
                                             'invalid', replay_invalid, 'validated', replay_validated),
         'chain_counts', CASE WHEN summary_captured THEN jsonb_build_object(
             'inference_count', chain_inference_count, 'missed_requests', chain_missed,
             'invalidated_inferences', chain_invalid, 'validated_inferences', chain_validated) END,
         'counts_match_chain', CASE WHEN summary_captured THEN chain_missed IS NOT DISTINCT FROM replay_missed
             AND chain_invalid IS NOT DISTINCT FROM replay_invalid END,
         'downtime_null_reason', downtime_null_reason,
         'exclusion', CASE WHEN excluded_reason = 'failed_confirmation_poc' AND (downtime_flips OR sprt_flips)
           THEN 'excluded for failed_confirmation_poc, which the disputable penalties do not cause: it would have been '
             || 'excluded, and paid nothing, without them (restitution_amount 0)'
           WHEN excluded_reason IS NULL AND participant_status = 'INACTIVE' AND disputable_missed = 0
                AND (downtime_flips OR sprt_flips)
           THEN 'INACTIVE at the epoch''s end (the in-epoch downtime test) with no disputable miss: it would have been '
             || 'INACTIVE, and paid nothing, without the disputable penalties (restitution_amount 0)' END,
         'downtime', jsonb_build_object('missed', downtime_missed, 'total', downtime_total,
                                        'missed_without_disputable', downtime_missed_without,
                                        'p0', downtime_p0, 'p0_without_disputable', downtime_p0_without,
                                        'skipped_by_circuit_breaker', downtime_skipped,
                                        'chain_error', downtime_chain_error,
                                        'without_rule', 'a removed miss becomes a completed inference: '
                                          || 'missed - 1, inference_count + 1, total unchanged'),
         'params', jsonb_build_object(
             'source', 'the epoch''s root epoch_group_data.validation_params snapshot (rec.epoch_params)',
             'params_exact', params_exact, 'params_height', params_height, 'captured', params_captured,
             'inexact', CASE WHEN params_exact = false THEN 'live parameters stood in for the epoch''s own (the '
               || 'node had pruned its heights): outcomes may use the wrong parameters' END,
             'changed_by_next_epoch', CASE WHEN params_changed_by_next_epoch THEN 'the next epoch''s snapshot '
               || 'differs: a governance change landed before the next epoch started, possibly during this one; '
               || 'the chain applies params as of each block, so results after it would use the new values' END),
         'chain_version', jsonb_build_object('version', COALESCE(chain_version, 'newest (assumed)'),
             'source', version_source, 'lower_bound', chain_version_lower_bound,
             'changed_in_epoch', chain_version_changed_in_epoch,
             'override', 'INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason)'),
         'reward', jsonb_build_object(
             'formula', 'floor(theoretical_epoch_reward * reward_weight / total_weight) (fn.reward_share), '
               || 'reward_weight = the effective weight by the chain version''s rule (fn.reward_weight), at most '
               || 'the power cap on the epoch''s ACTIVE effective weights (fn.power_cap)',
             'weight_basis', weight_basis,
             'weight_rule', CASE weight_basis
               WHEN 'confirmation_capped' THEN 'min(confirmation_weight, weight) (chain v0.2.12, weight >= raw total)'
               WHEN 'confirmation_rescaled' THEN 'floor(confirmation_weight * weight / raw_confirmation_weight), at '
                 || 'most weight'
               WHEN 'full' THEN 'the full weight (chain v0.2.13 on with empty confirmation_weight_scales, or weight <= 0)'
               END,
             'inputs', jsonb_build_object('weight', weight, 'confirmation_weight', confirmation_weight,
                                          'raw_confirmation_weight', raw_confirmation_weight,
                                          'confirmation_weight_scales', confirmation_weight_scales,
                                          'total_weight', total_weight, 'effective_weight', effective_weight,
                                          'reward_weight', reward_weight),
             'power_cap', jsonb_build_object(
                 'list', CASE WHEN in_cap_list THEN 'the effective weights of the epoch''s ACTIVE hosts (this one '
                   || 'included; a host that fails the downtime test is capped before it is zeroed)'
                   WHEN effective_weight > 0 THEN 'the effective weights of the epoch''s ACTIVE hosts plus this '
                   || 'host''s, which the chain ' || CASE WHEN excluded_reason IS NOT NULL THEN 'excluded'
                   ELSE 'had as ' || participant_status || ' at the epoch''s end' END
                   || ': had it passed it would have been ACTIVE' END,
                 'cap', CASE WHEN power_cap_error IS NULL AND cap_applies THEN power_cap END,
                 'applies', CASE WHEN power_cap_error IS NULL THEN cap_applies END,
                 'rule', CASE WHEN power_cap_error IS NULL THEN cap_rule END,
                 'lowered_by', CASE WHEN reward_weight < effective_weight THEN effective_weight - reward_weight END,
                 'restored_hosts', to_jsonb(restored_hosts),
                 'undecided_hosts', to_jsonb(undecided_hosts),
                 'as_paid', CASE WHEN in_cap_list AND paid_cap_error IS NULL THEN jsonb_build_object(
                     'applies', paid_cap_applies, 'cap', CASE WHEN paid_cap_applies THEN paid_cap END,
                     'paid_weight', paid_weight) END,
                 'restored_rule', CASE WHEN restored_hosts IS NOT NULL THEN 'without the disputable penalties the '
                   || 'hosts in restored_hosts would have been ACTIVE, in the one list the chain caps, so the cap '
                   || 'here is over that list; for a host the chain paid, reward_shift_without_disputable is what that '
                   || 'would have changed in its reward (the denominator, the sum of full weights, does not change, '
                   || 'so nothing else moves): neither paid nor recovered by a restitution' END,
                 'error', power_cap_error),
             'error', COALESCE(reward_error, reward_weight_error),
             'epoch_reward_chain_error', reward_chain_error,
             'zero_confirmation_weight', CASE WHEN confirmation_weight = 0 AND weight > 0 THEN
               'confirmation PoC left this host no confirmed weight: the chain pays it nothing on the confirmation '
               || 'basis; on its full weight it would get ' || reward_if_full_weight || ' ngonka' END,
             'chain_paid', chain_rewarded_coins,
             'not_computed', jsonb_build_array(
               'delegation transfers and penalties (chain v0.2.14 on): not captured; delegation_status and '
                 || 'restitution_amount_if_delegating say what they would change',
               'confirmation_weight is the last stored value, which may predate later confirmation rounds',
               'a negative coin balance (debt) the chain recovers from the reward coins, and the subsidy supply '
                 || 'cap (TotalSubsidyPaid against TotalSubsidySupply, which scales every reward down): neither '
                 || 'is captured'),
             'not_included', jsonb_build_array('work coins', 'collateral slash', 'reputation reset'))
       )) AS evidence,
       -- the weakest verification level among the escrows of the disputable penalties counted here (NULL: none)
       disputable_evidence_level AS evidence_level,
       payout_by_rule,
       chain_rewarded_coins = payout_by_rule AS payout_by_rule_matches,
       -- a host the restitution pays nothing: what it would have been paid without the disputable penalties of
       -- the epoch (the cap moved by restored hosts; the downtime test on the p0 their removed misses lower) less
       -- what the rule paid it; its own outcome does not flip, so this is the others' restitution acting on it
       CASE WHEN candidate IS NOT TRUE AND in_cap_list AND payout_by_rule IS NOT NULL
                 AND downtime_passes_without IS NOT NULL AND reward_if_passed IS NOT NULL
            THEN CASE WHEN downtime_passes_without THEN reward_if_passed ELSE 0 END - payout_by_rule
            END AS reward_shift_without_disputable
FROM delegated;

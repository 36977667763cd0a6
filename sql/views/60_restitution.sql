-- Restitution impact and policy what-if (docs/restitution.md). What one host's epoch would have been without
-- the disputable penalties, and under each rule variant, computed with the chain's own tests (fn.*) and the
-- parameters in force for the epoch (its root epoch_group_data snapshot, rec.epoch_params).

-- The chain versions the chain math knows and the upgrades recorded (chain.upgrade), with their heights; an upgrade
-- whose version the math does not reproduce has no ordinal and chain_math = false.
CREATE VIEW api.chain_versions AS
SELECT v.ordinal, COALESCE(v.chain_version, u.chain_version) AS chain_version, u.upgrade_name, u.height,
       u.source AS height_source, v.git_ref, v.git_commit, v.released, v.missed_stat_test, v.invalidation_sprt,
       v.epoch_reward, v.chain_version IS NOT NULL AS chain_math
FROM fn.chain_versions() v FULL JOIN chain.upgrade u ON u.chain_version = v.chain_version;

CREATE VIEW api.chain_version_overrides AS
SELECT override_id, first_epoch, last_epoch, chain_version, reason, set_at FROM chain.version_override;

-- The version in force per known epoch (fn.chain_version_at: override, else upgrade heights, else newest assumed).
CREATE VIEW api.epoch_chain_versions AS
SELECT k.epoch_index, c.chain_version, c.version_source, c.lower_bound, c.changed_in_epoch
FROM (SELECT epoch_index FROM rec.epoch UNION SELECT epoch_index FROM rec.epoch_params
      UNION SELECT epoch_index FROM replay.escrow WHERE epoch_index IS NOT NULL) k
CROSS JOIN LATERAL fn.chain_version_at(k.epoch_index) c;

-- One row per recorded penalty (the replay's), with what each rule variant makes of it. A "refusal" is a 0/0
-- Finish classified context_length or unknown (rules.context_refusal), or a refused/execution timeout shown over
-- the limit (rules.disputable timeout_over_limit). excused_<variant> = the variant would not assign the penalty.
CREATE VIEW api.policy_penalties AS
WITH p AS (
  SELECT i.epoch_index, i.escrow_id, i.inference_id, i.executor_address AS participant, i.executor_slot,
         i.penalty, i.status, i.timeout_reason, d.rule AS disputable_rule,
         cr.refusal_kind, cr.verdict AS refusal_verdict, cr.prompt_tokens, cr.prompt_tokens_source,
         cr.prompt_is_lower_bound, cr.max_tokens AS refusal_max_tokens,
         COALESCE(cr.governance_limit, (t.evidence ->> 'governance_limit')::bigint) AS governance_limit,
         (t.evidence ->> 'sibling_input_tokens')::bigint AS timeout_sibling_input_tokens,
         sf.applied AS error_miss_applied, sf.client_fault_basis, sf.accepted_current_rule,
         sf.accepted_hardened_rule,
         COALESCE(cr.refusal_kind IN ('context_length', 'unknown'), false) AS is_refusal_finish,
         t.escrow_id IS NOT NULL AS is_over_limit_timeout
  FROM replay.inference i
  LEFT JOIN rules.disputable d
         ON d.escrow_id = i.escrow_id AND d.inference_id = i.inference_id AND d.penalty = i.penalty
  LEFT JOIN rules.context_refusal cr ON cr.escrow_id = i.escrow_id AND cr.inference_id = i.inference_id
  LEFT JOIN rules.sibling_finding sf ON sf.escrow_id = i.escrow_id AND sf.inference_id = i.inference_id
  LEFT JOIN rules.disputable t ON t.escrow_id = i.escrow_id AND t.inference_id = i.inference_id
                              AND t.rule = 'timeout_over_limit' AND i.penalty = 'missed'
  WHERE i.penalty IS NOT NULL
)
SELECT p.*,
       disputable_rule IS NOT NULL AS excused_without_disputable,
       -- issue_2078: a refusal not shown to fit the governance limit costs nothing
       (is_refusal_finish AND refusal_verdict <> 'fits') OR is_over_limit_timeout AS excused_issue_2078,
       -- tokenize_2093: excused only where a count shows prompt + max_tokens > limit (verdict over_limit)
       (is_refusal_finish AND refusal_verdict = 'over_limit') OR is_over_limit_timeout AS excused_tokenize_2093,
       -- narrow_prompt_ge_limit: excused only by a prompt count at or over the limit (a lower bound >= limit shows
       -- it); the gateway's estimate (prompt_tokens_source input_length) is recorded, never decisive
       COALESCE((is_refusal_finish AND prompt_tokens_source IN ('sibling', 'error_text')
                 AND prompt_tokens >= governance_limit)
                OR (is_over_limit_timeout AND timeout_sibling_input_tokens >= governance_limit), false)
           AS excused_narrow_prompt_ge_limit,
       -- hardened_sibling: an error-miss miss that the sibling rule with sibling input + max_tokens <= limit rejects
       COALESCE(penalty = 'missed' AND error_miss_applied AND client_fault_basis IS NOT NULL
                AND accepted_hardened_rule = false, false) AS excused_hardened_sibling
FROM p;

-- One row per epoch, variant, host and escrow: the status update the chain makes when the escrow settles
-- (docs/restitution.md "SPRT order"). Steps are numbered in settlement order: the escrow record's settled_height
-- when given (an unknown field kept in rec.escrow.extra), else the numeric escrow id (creation order). Escrows
-- known unsettled (settled = false) have reached no chain counter and are left out, and so are escrows settled in
-- the next epoch (fn.settled_after_epoch: the chain pays them but adds nothing to the epoch's counters). Per the chain's settlement
-- (v0.2.12 on, AggregateDevshardHostStatsIntoCurrentEpochStats): inference_count += assigned - missed,
-- validated += assigned - missed - invalid, assigned = fn.devshard_assigned_upper_bound over the host's slots at the
-- settled nonce (the escrow record's settle_nonce; without it, the host's replayed inferences); an excused miss or
-- invalidation becomes a validation.
CREATE VIEW api.restitution_steps AS
WITH variants(variant) AS (
  VALUES ('current'), ('without_disputable'), ('issue_2078'), ('tokenize_2093'), ('narrow_prompt_ge_limit'),
         ('hardened_sibling')
), replayed AS (
  SELECT i.epoch_index, i.executor_address AS participant, i.escrow_id, count(*) AS ran,
         count(*) FILTER (WHERE i.penalty = 'missed') AS missed,
         count(*) FILTER (WHERE i.penalty = 'invalid') AS invalid
  FROM replay.inference i
  WHERE i.executor_address IS NOT NULL AND i.epoch_index IS NOT NULL
  GROUP BY 1, 2, 3
), host_escrow AS (  -- the settled escrows the chain counted; assigned: its bound at the settled nonce when known
  SELECT r.epoch_index, r.participant, r.escrow_id, (e.extra ->> 'settled_height')::bigint AS settled_height,
         COALESCE(b.assigned, r.ran) AS assigned, r.missed, r.invalid,
         b.assigned IS NOT NULL AS assigned_from_settle_nonce,
         COALESCE(ev.level, 'none') AS evidence_level  -- no verification row: not verified yet
  FROM replayed r
  LEFT JOIN rec.escrow e ON e.escrow_id = r.escrow_id
  LEFT JOIN replay.escrow_verification ev ON ev.escrow_id = r.escrow_id
  LEFT JOIN rec.epoch ep ON ep.epoch_index = r.epoch_index
  LEFT JOIN LATERAL (
    SELECT sum(fn.devshard_assigned_upper_bound((e.extra ->> 'settle_nonce')::bigint, cardinality(e.slots),
                                                s.slot_id::int - 1))::bigint AS assigned
    FROM unnest(e.slots) WITH ORDINALITY AS s(address, slot_id)
    WHERE s.address = r.participant AND e.extra ? 'settle_nonce'
    HAVING count(*) > 0
  ) b ON true
  WHERE e.settled IS DISTINCT FROM false
    AND NOT fn.settled_after_epoch((e.extra ->> 'settled_height')::bigint, ep.end_height)
), excused AS (
  SELECT p.escrow_id, p.participant, v.variant,
         count(*) FILTER (WHERE p.penalty = 'missed') AS excused_missed,
         count(*) FILTER (WHERE p.penalty = 'invalid') AS excused_invalid
  FROM api.policy_penalties p
  CROSS JOIN LATERAL (VALUES ('without_disputable', p.excused_without_disputable),
                             ('issue_2078', p.excused_issue_2078), ('tokenize_2093', p.excused_tokenize_2093),
                             ('narrow_prompt_ge_limit', p.excused_narrow_prompt_ge_limit),
                             ('hardened_sibling', p.excused_hardened_sibling)) v(variant, excused)
  WHERE v.excused
  GROUP BY 1, 2, 3
), ordered AS (
  SELECT h.*, v.variant,
         COALESCE(x.excused_missed, 0) AS excused_missed, COALESCE(x.excused_invalid, 0) AS excused_invalid
  FROM host_escrow h
  CROSS JOIN variants v
  LEFT JOIN excused x ON x.escrow_id = h.escrow_id AND x.participant = h.participant AND x.variant = v.variant
)
SELECT epoch_index, variant, participant, escrow_id,
       row_number() OVER (PARTITION BY epoch_index, variant, participant
                          ORDER BY settled_height NULLS LAST,
                                   CASE WHEN escrow_id ~ '^[0-9]+$' THEN escrow_id::numeric END NULLS LAST,
                                   escrow_id)::int AS step,
       settled_height, assigned, assigned_from_settle_nonce, missed - excused_missed AS missed,
       invalid - excused_invalid AS invalid,
       assigned - (missed - excused_missed) - (invalid - excused_invalid) AS passes,
       excused_missed, excused_invalid, evidence_level
FROM ordered;

-- Per epoch, variant and host: the counts the chain would hold and its two tests on them.
CREATE VIEW api.restitution_outcomes AS
WITH steps AS (
  SELECT epoch_index, variant, participant,
         array_agg(invalid ORDER BY step) AS failures, array_agg(passes ORDER BY step) AS passes,
         array_agg(escrow_id ORDER BY step) AS escrows, bool_and(settled_height IS NOT NULL) AS settle_heights_known,
         bool_and(assigned_from_settle_nonce) AS assigned_from_settle_nonce,
         sum(assigned)::bigint AS assigned, sum(missed)::bigint AS missed, sum(invalid)::bigint AS invalid,
         sum(passes)::bigint AS validated, sum(excused_missed)::bigint AS excused_missed,
         sum(excused_invalid)::bigint AS excused_invalid,
         -- the weakest verification level among the escrows whose penalties the variant removes (none removed:
         -- NULL, not 'none')
         fn.evidence_level(min(fn.evidence_rank(evidence_level)) FILTER (WHERE excused_missed + excused_invalid > 0))
           AS evidence_level
  FROM api.restitution_steps GROUP BY 1, 2, 3
), settled_late AS (  -- escrows of the epoch a host held a slot in, settled after it (not in its counters)
  SELECT e.epoch_index, slot.participant, array_agg(DISTINCT e.escrow_id ORDER BY e.escrow_id) AS escrows
  FROM rec.escrow e
  JOIN rec.epoch ep ON ep.epoch_index = e.epoch_index
  CROSS JOIN LATERAL unnest(e.slots) AS slot(participant)
  WHERE e.settled IS DISTINCT FROM false
    AND fn.settled_after_epoch((e.extra ->> 'settled_height')::bigint, ep.end_height)
  GROUP BY 1, 2
), variants AS (
  SELECT DISTINCT variant FROM (VALUES ('current'), ('without_disputable'), ('issue_2078'), ('tokenize_2093'),
                                       ('narrow_prompt_ge_limit'), ('hardened_sibling')) v(variant)
), hosts AS (
  SELECT DISTINCT epoch_index, participant FROM steps
  UNION SELECT epoch_index, participant FROM rec.participant_epoch
), epochs AS (
  SELECT h.epoch_index, c.chain_version, c.version_source, c.lower_bound, c.changed_in_epoch,
         ep.validation_params, ep.params_exact, ep.params_height, ep.total_weight, ep.bitcoin_reward_params,
         ep.confirmation_weight_scales, fn.pass_count_flags(ep.devshard_escrow_params) AS pass_count_flags,
         fn.chain_decimal(ep.validation_params -> 'false_positive_rate') AS sprt_p0,
         fn.chain_decimal(ep.validation_params -> 'bad_participant_invalidation_rate') AS sprt_p1,
         fn.chain_decimal(ep.validation_params -> 'invalidation_h_threshold') AS sprt_threshold,
         fn.chain_decimal(ep.validation_params -> 'binom_test_p0') AS binom_test_p0,
         nx.validation_params IS NOT NULL AND (
           SELECT bool_or(ep.validation_params -> k IS DISTINCT FROM nx.validation_params -> k)
           FROM unnest(ARRAY['false_positive_rate', 'bad_participant_invalidation_rate',
                             'invalidation_h_threshold', 'binom_test_p0']) k) AS params_changed_by_next_epoch
  FROM (SELECT DISTINCT epoch_index FROM hosts) h
  CROSS JOIN LATERAL fn.chain_version_at(h.epoch_index) c
  LEFT JOIN rec.epoch_params ep ON ep.epoch_index = h.epoch_index
  LEFT JOIN rec.epoch_params nx ON nx.epoch_index - 1 = h.epoch_index  -- not h + 1: the last epoch has no next
), base AS (
  SELECT h.epoch_index, v.variant, h.participant, s.failures, s.passes, s.escrows, s.settle_heights_known,
         s.assigned_from_settle_nonce,
         s.assigned, s.missed AS replay_missed, s.invalid AS replay_invalid, s.validated AS replay_validated,
         COALESCE(s.excused_missed, 0) AS excused_missed, COALESCE(s.excused_invalid, 0) AS excused_invalid,
         pe.participant IS NOT NULL AS summary_captured, pe.inference_count AS chain_inference_count,
         pe.missed_requests AS chain_missed, pe.invalidated_inferences AS chain_invalid,
         pe.validated_inferences AS chain_validated, pe.confirmation_weight, pe.weight, pe.excluded_reason,
         pe.excluded_height, pe.raw_confirmation_weight, pe.rewarded_coins AS chain_rewarded_coins,
         pe.status AS participant_status,
         -- the downtime counts the settlement passes (total = inference_count + missed_requests); an excused
         -- miss becomes a completed inference, so the total stays and missed drops
         sl.escrows AS escrows_settled_late,
         pe.missed_requests - LEAST(COALESCE(s.excused_missed, 0), pe.missed_requests) AS downtime_missed,
         -- (past 2^63 - 1 the chain's uint64 sum has no bigint: unknown, not an error that stops the view)
         fn.bigint_or_null(pe.inference_count::numeric + pe.missed_requests) AS downtime_total,
         s.evidence_level,
         pe.inference_count::numeric + LEAST(COALESCE(s.excused_missed, 0), pe.missed_requests)
           AS downtime_inference_count,
         pe.inference_count::numeric + pe.missed_requests AS downtime_requests
  FROM hosts h CROSS JOIN variants v
  LEFT JOIN steps s ON s.epoch_index = h.epoch_index AND s.participant = h.participant AND s.variant = v.variant
  LEFT JOIN rec.participant_epoch pe ON pe.epoch_index = h.epoch_index AND pe.participant = h.participant
  LEFT JOIN settled_late sl ON sl.epoch_index = h.epoch_index AND sl.participant = h.participant
), sums AS (  -- getDynamicP0's epoch-wide inputs, over participants with requests, under the same variant; its
  -- uint64 sums saturate at 2^64 - 1 (bits.Add64 with the carry clamped)
  SELECT epoch_index, variant, least(sum(downtime_requests), 18446744073709551615) AS epoch_total,
         least(sum(downtime_missed), 18446744073709551615) AS epoch_missed, count(*)::int AS epoch_participants
  FROM base WHERE downtime_requests > 0 GROUP BY 1, 2
)
SELECT b.*, e.chain_version, e.version_source, e.lower_bound AS chain_version_lower_bound,
       e.changed_in_epoch AS chain_version_changed_in_epoch, e.params_exact, e.params_height,
       e.params_changed_by_next_epoch, e.validation_params IS NOT NULL AS params_captured,
       e.total_weight, e.bitcoin_reward_params, e.confirmation_weight_scales, e.sprt_p0, e.sprt_p1, e.sprt_threshold, e.binom_test_p0,
       e.pass_count_flags,
       dt.passes AS downtime_passes, dt.p0 AS downtime_p0, dt.skipped AS downtime_skipped,
       CASE WHEN NOT b.summary_captured THEN 'no epoch_performance_summary captured for this host and epoch'
            WHEN b.downtime_requests IS NULL THEN 'the captured summary has no inference_count / missed_requests'
            ELSE dt.error END AS downtime_null_reason,
       sp.max_llr AS sprt_max_llr, sp.crossed AS sprt_crossed, sp.crossed_at AS sprt_crossed_at_step,
       b.escrows[sp.crossed_at] AS sprt_crossed_at_escrow, sp.final_llr AS sprt_final_llr,
       CASE WHEN b.failures IS NULL THEN 'no replayed escrow results for this host in the epoch'
            WHEN e.validation_params IS NULL THEN 'no validation_params snapshot captured for the epoch'
            WHEN e.sprt_p0 IS NULL OR e.sprt_p1 IS NULL OR e.sprt_threshold IS NULL
              THEN 'the epoch''s validation_params lack an SPRT parameter'
            ELSE sp.error END AS sprt_null_reason,
       dt.chain_error AS downtime_chain_error
FROM base b
JOIN epochs e ON e.epoch_index = b.epoch_index
LEFT JOIN sums s ON s.epoch_index = b.epoch_index AND s.variant = b.variant
-- no host with requests: getDynamicP0's sums are 0 (its sample gate then gives the governance p0, no skip)
CROSS JOIN LATERAL fn.downtime_outcome(b.downtime_missed, b.downtime_inference_count, COALESCE(s.epoch_total, 0),
                                       COALESCE(s.epoch_missed, 0), COALESCE(s.epoch_participants, 0),
                                       e.binom_test_p0, e.chain_version) dt
CROSS JOIN LATERAL fn.sprt_steps_safe(CASE WHEN b.failures IS NOT NULL AND e.sprt_threshold IS NOT NULL
                                           THEN b.failures END,
                                      b.passes, e.sprt_p0, e.sprt_p1, e.sprt_threshold, e.chain_version) sp;

CREATE VIEW api.policy_whatif AS
SELECT epoch_index, variant, participant,
       COALESCE(chain_missed - LEAST(excused_missed, chain_missed), replay_missed) AS missed,
       COALESCE(chain_invalid - LEAST(excused_invalid, chain_invalid), replay_invalid) AS invalid,
       downtime_passes, sprt_crossed, excused_missed AS removed_missed, excused_invalid AS removed_invalid,
       sprt_max_llr, sprt_threshold, downtime_null_reason, sprt_null_reason, chain_version, params_exact
FROM api.restitution_outcomes WHERE variant <> 'without_disputable';

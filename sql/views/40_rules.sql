-- The rules stage's findings. Vocabulary in interface.md §3.

-- A model whose epoch_group_data read failed (net.snapshot_failure) has its row even when nothing else names it:
-- governance_limit null and limit_unknown_reason saying why, never an absent row.
CREATE VIEW api.model_limits AS
SELECT COALESCE(l.epoch_index, f.epoch_index) AS epoch_index, COALESCE(l.model_id, f.model_id) AS model_id,
       l.governance_limit, l.limit_source, l.model_args, l.args_limit, l.escrow_limit,
       l.flag_occurrences, l.mixed_forms, l.loophole_risk, l.rule_version,
       CASE WHEN l.governance_limit IS NOT NULL THEN NULL
            WHEN f.source IS NOT NULL THEN 'model snapshot read failed: ' || f.error
            WHEN l.model_args IS NULL THEN 'no model snapshot captured for this epoch'
            ELSE 'the model_args set no --max-model-len' END AS limit_unknown_reason,
       f.url AS snapshot_failed_url, f.last_at AS snapshot_failed_at
FROM rules.model_limit l
FULL JOIN (SELECT * FROM net.snapshot_failure WHERE what = 'model') f
       ON f.epoch_index = l.epoch_index AND f.model_id = l.model_id;

CREATE VIEW api.context_refusals AS
SELECT escrow_id, inference_id, epoch_index, model_id, executor_slot, executor_address, status, penalty,
       refusal_kind, error_code, reported_limit, reported_prompt_tokens, reported_prompt_is_lower_bound,
       reported_max_tokens, governance_limit, limit_source, max_tokens, input_length, prompt_tokens,
       prompt_tokens_source, prompt_is_lower_bound, verdict, evidence, rule_version
FROM rules.context_refusal;

CREATE VIEW api.sibling_findings AS
SELECT escrow_id, inference_id, epoch_index, error_miss_nonce, applied, client_fault_basis, billed,
       sibling_inference_id, sibling_input_tokens, sibling_output_tokens, sibling_status, governance_limit,
       max_tokens, accepted_current_rule, accepted_hardened_rule, rule_version
FROM rules.sibling_finding;

CREATE VIEW api.raised_limit_suspects AS
SELECT epoch_index, participant, model_id, evidence_kind, observed_tokens, governance_limit, escrow_id,
       inference_id, rule_version
FROM rules.suspect;

-- evidence_level: how far the penalty's escrow log was verified (fn.evidence_levels); an escrow without a
-- verification row has not been verified yet and is level none, as api.escrow_verification says.
CREATE VIEW api.disputable_penalties AS
SELECT d.epoch_index, d.escrow_id, d.inference_id, d.participant, d.executor_slot, d.penalty, d.rule, d.verdict,
       d.evidence, d.detected_at, d.rule_version, COALESCE(v.level, 'none') AS evidence_level
FROM rules.disputable d
LEFT JOIN replay.escrow_verification v ON v.escrow_id = d.escrow_id;

-- Recorded penalties (the replay's counters summed per host and epoch, beside what the chain reported in
-- host_epoch_stats when captured) against the disputable ones. Keyed by the union of the three sides' (epoch,
-- participant) rather than a FULL JOIN on COALESCEd keys, so a filter on epoch_index reaches every side (and
-- rules.disputable is read in that epoch's partition only: the CTEs are NOT MATERIALIZED so the filter enters them).
CREATE VIEW api.host_epoch_penalties AS
WITH recorded AS NOT MATERIALIZED (
  SELECT r.epoch_index, s.participant, sum(s.missed)::bigint AS missed, sum(s.invalid)::bigint AS invalid,
         count(DISTINCT s.escrow_id)::bigint AS escrows
  FROM replay.slot_stats s JOIN replay.escrow r ON r.escrow_id = s.escrow_id
  GROUP BY r.epoch_index, s.participant
), disputed AS NOT MATERIALIZED (
  SELECT epoch_index, participant, count(*) FILTER (WHERE penalty = 'missed')::bigint AS disputable_missed,
         count(*) FILTER (WHERE penalty = 'invalid')::bigint AS disputable_invalid
  FROM rules.disputable GROUP BY epoch_index, participant
)
SELECT k.epoch_index, k.participant,
       r.missed, r.invalid,
       COALESCE(d.disputable_missed, 0) AS disputable_missed,
       COALESCE(d.disputable_invalid, 0) AS disputable_invalid,
       h.missed AS reported_missed, h.invalid AS reported_invalid, r.escrows
FROM (SELECT epoch_index, participant FROM recorded r
      UNION SELECT epoch_index, participant FROM rec.host_epoch_stats
      UNION SELECT epoch_index, participant FROM disputed d) k
LEFT JOIN recorded r ON r.epoch_index = k.epoch_index AND r.participant = k.participant
LEFT JOIN rec.host_epoch_stats h ON h.epoch_index = k.epoch_index AND h.participant = k.participant
LEFT JOIN disputed d ON d.epoch_index = k.epoch_index AND d.participant = k.participant;

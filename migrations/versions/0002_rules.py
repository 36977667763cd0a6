"""rules stage: governance limits, refusal parses, context verdicts, sibling findings, suspects, challenges,
disputable penalties

Revision ID: 0002_rules
Revises: 0001_foundation
Create Date: 2026-11-29
"""
from alembic import op

revision = "0002_rules"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None

TABLES = ["rules.disputable", "rules.challenge", "rules.suspect", "rules.sibling_finding", "rules.context_refusal",
          "rules.escrow_limit", "rules.model_limit", "rules.refusal_parse", "rules.run"]

UPGRADE = """
CREATE INDEX ix_rejected_tx_escrow_id_inference_id ON replay.rejected_tx (escrow_id, inference_id);
-- the rules read the 0/0 Finishes (refusals) often; a partial index keeps that cheap without taxing other inserts
CREATE INDEX ix_finish_tx_escrow_id_zero_zero ON rec.finish_tx (escrow_id, inference_id)
    WHERE input_tokens = 0 AND output_tokens = 0;
CREATE INDEX ix_inference_epoch_index_timed_out ON replay.inference (epoch_index) WHERE status = 'TimedOut';
CREATE TABLE rules.refusal_parse (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    payload_md5 text NOT NULL,
    parser_version integer NOT NULL,
    refusal_kind text NOT NULL,
    is_client_fault boolean NOT NULL,
    is_terminal_error boolean NOT NULL,
    error_code integer,
    error_type text,
    family text,
    reported_limit bigint,
    reported_prompt_tokens bigint,
    reported_prompt_is_lower_bound boolean NOT NULL,
    reported_max_tokens bigint,
    requested_total bigint,
    reported_prompt_chars bigint,
    suffix_parameter text,
    suffix_value bigint,
    message text,
    CONSTRAINT pk_refusal_parse PRIMARY KEY (escrow_id, inference_id)
);
COMMENT ON TABLE rules.refusal_parse IS 'vLLM error parse of each 0/0 Finish payload; re-parsed when the payload or parser changes';
CREATE TABLE rules.model_limit (
    epoch_index bigint NOT NULL,
    model_id text NOT NULL,
    governance_limit bigint,
    limit_source text,
    model_args text[],
    args_limit bigint,
    escrow_limit bigint,
    flag_occurrences integer NOT NULL,
    mixed_forms boolean NOT NULL,
    loophole_risk boolean NOT NULL,
    rule_version integer NOT NULL,
    CONSTRAINT pk_model_limit PRIMARY KEY (epoch_index, model_id)
);
CREATE TABLE rules.escrow_limit (
    escrow_id text NOT NULL,
    epoch_index bigint,
    model_id text,
    governance_limit bigint,
    limit_source text,
    CONSTRAINT pk_escrow_limit PRIMARY KEY (escrow_id)
);
CREATE INDEX ix_escrow_limit_epoch_index ON rules.escrow_limit (epoch_index);
CREATE TABLE rules.context_refusal (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    epoch_index bigint,
    model_id text,
    executor_slot integer,
    executor_address text,
    status text,
    penalty text,
    refusal_kind text NOT NULL,
    error_code integer,
    reported_limit bigint,
    reported_prompt_tokens bigint,
    reported_prompt_is_lower_bound boolean,
    reported_max_tokens bigint,
    governance_limit bigint,
    limit_source text,
    max_tokens bigint,
    input_length bigint,
    prompt_tokens bigint,
    prompt_tokens_source text,
    prompt_is_lower_bound boolean NOT NULL,
    verdict text NOT NULL,
    evidence jsonb NOT NULL,
    rule_version integer NOT NULL,
    CONSTRAINT pk_context_refusal PRIMARY KEY (escrow_id, inference_id),
    CONSTRAINT ck_context_refusal_verdict CHECK (verdict IN ('over_limit', 'fits', 'undetermined'))
);
CREATE INDEX ix_context_refusal_epoch_index ON rules.context_refusal (epoch_index);
CREATE TABLE rules.sibling_finding (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    epoch_index bigint,
    error_miss_nonce bigint,
    applied boolean NOT NULL,
    client_fault_basis text,
    billed boolean,
    sibling_inference_id bigint,
    sibling_input_tokens bigint,
    sibling_output_tokens bigint,
    sibling_status text,
    governance_limit bigint,
    max_tokens bigint,
    accepted_current_rule boolean,
    accepted_hardened_rule boolean,
    rule_version integer NOT NULL,
    CONSTRAINT pk_sibling_finding PRIMARY KEY (escrow_id, inference_id)
);
CREATE INDEX ix_sibling_finding_epoch_index ON rules.sibling_finding (epoch_index);
CREATE TABLE rules.suspect (
    epoch_index bigint NOT NULL,
    participant text NOT NULL,
    model_id text,
    evidence_kind text NOT NULL,
    observed_tokens bigint,
    governance_limit bigint,
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    rule_version integer NOT NULL,
    CONSTRAINT ck_suspect_evidence_kind CHECK (evidence_kind IN
        ('served_above_limit', 'stated_limit_above', 'voted_invalid_on_over_limit'))
);
CREATE INDEX ix_suspect_epoch_index_participant ON rules.suspect (epoch_index, participant);
CREATE TABLE rules.challenge (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    epoch_index bigint,
    is_client_fault_finish boolean NOT NULL,
    suspect_invalid_weight integer NOT NULL,
    suspect_voters text[],
    outcome_without_suspects text,
    rule_version integer NOT NULL,
    CONSTRAINT pk_challenge PRIMARY KEY (escrow_id, inference_id)
);
CREATE INDEX ix_challenge_epoch_index ON rules.challenge (epoch_index);
CREATE TABLE rules.disputable (
    epoch_index bigint,
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    participant text,
    executor_slot integer,
    penalty text NOT NULL,
    rule text NOT NULL,
    verdict text,
    evidence jsonb NOT NULL,
    rule_version integer NOT NULL,
    detected_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_disputable PRIMARY KEY (escrow_id, inference_id, penalty)
);
CREATE INDEX ix_disputable_epoch_index ON rules.disputable (epoch_index);
CREATE TABLE rules.run (
    run_id bigserial,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    epochs bigint[] NOT NULL,
    rule_version integer NOT NULL,
    parsed_payloads integer,
    disputable integer,
    CONSTRAINT pk_run PRIMARY KEY (run_id)
);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"DROP TABLE IF EXISTS {table}")
    for index in ("replay.ix_rejected_tx_escrow_id_inference_id", "rec.ix_finish_tx_escrow_id_zero_zero",
                  "replay.ix_inference_epoch_index_timed_out"):
        op.execute(f"DROP INDEX IF EXISTS {index}")

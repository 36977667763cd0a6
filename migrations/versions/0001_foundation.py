"""foundation: provenance, typed record tables, quarantine, amendments, replay tables

Revision ID: 0001_foundation
Revises:
Create Date: 2026-11-29
"""
from alembic import op

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None

SCHEMAS = ("rec", "replay", "rules")

PROVENANCE = """
CREATE TABLE rec.source (
    source_id bigserial,
    digest text NOT NULL,
    uri text NOT NULL,
    source_kind text NOT NULL DEFAULT 'ndjson',
    lines_committed bigint NOT NULL DEFAULT 0,
    completed_at timestamptz,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    last_loaded_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_source PRIMARY KEY (source_id),
    CONSTRAINT uq_source_digest UNIQUE (digest)
);
COMMENT ON TABLE rec.source IS 'Provenance: one row per input (NDJSON file by sha256 digest); lines_committed is the resume cursor';
CREATE TABLE rec.quarantine (
    source_id bigint NOT NULL,
    line bigint NOT NULL,
    kind text,
    reason text NOT NULL,
    raw text,
    quarantined_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_quarantine PRIMARY KEY (source_id, line),
    CONSTRAINT fk_quarantine_source_id_source FOREIGN KEY (source_id) REFERENCES rec.source (source_id)
);
CREATE TABLE rec.amendment (
    amendment_id bigserial,
    kind text NOT NULL,
    record_key jsonb NOT NULL,
    previous jsonb NOT NULL,
    source_id bigint NOT NULL,
    line bigint NOT NULL,
    amended_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_amendment PRIMARY KEY (amendment_id)
);
COMMENT ON TABLE rec.amendment IS 'Previous content of records replaced by a later record with the same key';
"""

FUNCTIONS = """
CREATE FUNCTION rec.try_timestamptz(t text) RETURNS timestamptz LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN RETURN t::timestamptz; EXCEPTION WHEN others THEN RETURN NULL; END $$;
CREATE FUNCTION rec.try_jsonb(t text) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN RETURN t::jsonb; EXCEPTION WHEN others THEN RETURN NULL; END $$;
"""

RECORDS = """
CREATE TABLE rec.epoch (
    epoch_index bigint NOT NULL,
    start_height bigint,
    end_height bigint,
    observed_at timestamptz,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_epoch PRIMARY KEY (epoch_index)
);
CREATE TABLE rec.model_snapshot (
    epoch_index bigint NOT NULL,
    model_id text NOT NULL,
    model_args text[],
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_model_snapshot PRIMARY KEY (epoch_index, model_id)
);
CREATE TABLE rec.escrow (
    escrow_id text NOT NULL,
    epoch_index bigint,
    model_id text,
    slots text[],
    vote_threshold_factor integer,
    validation_rate integer,
    max_model_len bigint,
    protocol_version text,
    settled boolean,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_escrow PRIMARY KEY (escrow_id)
);
CREATE TABLE rec.start_tx (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    diff_nonce bigint,
    prompt_hash text,
    model text,
    input_length bigint,
    max_tokens bigint,
    started_at bigint,
    tx_index integer,
    protocol_version text,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_start_tx PRIMARY KEY (escrow_id, inference_id)
);
CREATE TABLE rec.confirm_start_tx (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    diff_nonce bigint,
    confirmed_at bigint,
    tx_index integer,
    protocol_version text,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_confirm_start_tx PRIMARY KEY (escrow_id, inference_id)
);
CREATE TABLE rec.finish_tx (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    diff_nonce bigint,
    executor_slot integer,
    input_tokens bigint,
    output_tokens bigint,
    response_hash text,
    response_payload text,
    tx_index integer,
    protocol_version text,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_finish_tx PRIMARY KEY (escrow_id, inference_id)
);
CREATE TABLE rec.validation_tx (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    validator_slot integer NOT NULL,
    diff_nonce bigint,
    valid boolean,
    tx_index integer,
    protocol_version text,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_validation_tx PRIMARY KEY (escrow_id, inference_id, validator_slot)
);
CREATE TABLE rec.validation_vote_tx (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    voter_slot integer NOT NULL,
    diff_nonce bigint,
    vote_valid boolean,
    tx_index integer,
    protocol_version text,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_validation_vote_tx PRIMARY KEY (escrow_id, inference_id, voter_slot)
);
CREATE TABLE rec.timeout_tx (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    diff_nonce bigint,
    reason text,
    votes jsonb,
    tx_index integer,
    protocol_version text,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_timeout_tx PRIMARY KEY (escrow_id, inference_id)
);
CREATE TABLE rec.error_miss_tx (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    diff_nonce bigint,
    votes jsonb,
    tx_index integer,
    protocol_version text,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_error_miss_tx PRIMARY KEY (escrow_id, inference_id)
);
CREATE TABLE rec.host_stats (
    escrow_id text NOT NULL,
    slot_id integer NOT NULL,
    missed bigint,
    invalid bigint,
    cost numeric(20,0),
    required_validations bigint,
    completed_validations bigint,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_host_stats PRIMARY KEY (escrow_id, slot_id)
);
CREATE TABLE rec.host_epoch_stats (
    epoch_index bigint NOT NULL,
    participant text NOT NULL,
    missed bigint,
    invalid bigint,
    cost numeric(20,0),
    required_validations bigint,
    completed_validations bigint,
    escrow_count bigint,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_host_epoch_stats PRIMARY KEY (epoch_index, participant)
);
CREATE INDEX ix_escrow_epoch_index ON rec.escrow (epoch_index);
CREATE INDEX ix_start_tx_escrow_id_prompt_hash ON rec.start_tx (escrow_id, prompt_hash);
"""

REPLAY = """
CREATE TABLE replay.dirty_escrow (
    escrow_id text NOT NULL,
    marked_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_dirty_escrow PRIMARY KEY (escrow_id)
);
CREATE TABLE replay.escrow (
    escrow_id text NOT NULL,
    epoch_index bigint,
    group_size integer NOT NULL,
    vote_threshold integer NOT NULL,
    tx_count bigint NOT NULL,
    rejected_count bigint NOT NULL,
    replayed_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_escrow PRIMARY KEY (escrow_id)
);
CREATE TABLE replay.inference (  -- each status is entered at most once: its causing tx is a *_nonce column
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    epoch_index bigint,
    executor_slot integer,
    executor_address text,
    status text NOT NULL,
    votes_valid integer NOT NULL,
    votes_invalid integer NOT NULL,
    vote_threshold integer NOT NULL,
    penalty text,
    status_nonce bigint,
    start_nonce bigint,
    started_nonce bigint,
    finished_nonce bigint,
    challenged_nonce bigint,
    challenger_slot integer,
    resolved_nonce bigint,
    timeout_reason text,
    timed_out_nonce bigint,
    drained boolean NOT NULL DEFAULT false,
    CONSTRAINT pk_inference PRIMARY KEY (escrow_id, inference_id),
    CONSTRAINT ck_inference_status CHECK (status IN ('Pending','Started','Finished','Challenged','Validated','Invalidated','TimedOut')),
    CONSTRAINT ck_inference_penalty CHECK (penalty IN ('missed','invalid'))
);
CREATE INDEX ix_inference_epoch_index ON replay.inference (epoch_index);
CREATE TABLE replay.rejected_tx (
    escrow_id text NOT NULL,
    ordinal integer NOT NULL,
    diff_nonce bigint NOT NULL,
    kind text NOT NULL,
    inference_id bigint NOT NULL,
    slot integer,
    reason text NOT NULL,
    ignored boolean NOT NULL DEFAULT false,
    CONSTRAINT pk_rejected_tx PRIMARY KEY (escrow_id, ordinal)
);
COMMENT ON TABLE replay.rejected_tx IS 'Txs the state machine would not apply (ignored = accepted by the protocol with no effect)';
CREATE TABLE replay.vote (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    ordinal integer NOT NULL,
    diff_nonce bigint NOT NULL,
    kind text NOT NULL,
    slot integer NOT NULL,
    address text NOT NULL,
    weight integer NOT NULL,
    valid boolean NOT NULL,
    effect text NOT NULL,
    CONSTRAINT pk_vote PRIMARY KEY (escrow_id, inference_id, ordinal),
    CONSTRAINT ck_vote_effect CHECK (effect IN ('weight', 'no_weight', 'ignored'))
);
COMMENT ON TABLE replay.vote IS 'Accepted validations and challenge votes in protocol order, with weight and effect';
CREATE TABLE replay.slot_stats (
    escrow_id text NOT NULL,
    slot_id integer NOT NULL,
    participant text,
    missed bigint NOT NULL,
    invalid bigint NOT NULL,
    CONSTRAINT pk_slot_stats PRIMARY KEY (escrow_id, slot_id)
);
CREATE TABLE rules.dirty_epoch (
    epoch_index bigint NOT NULL,
    marked_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_dirty_epoch PRIMARY KEY (epoch_index)
);
"""


def upgrade() -> None:
    for schema in SCHEMAS:
        op.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    op.execute(PROVENANCE)
    op.execute(FUNCTIONS)
    op.execute(RECORDS)
    op.execute(REPLAY)


def downgrade() -> None:
    for schema in reversed(SCHEMAS):
        op.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

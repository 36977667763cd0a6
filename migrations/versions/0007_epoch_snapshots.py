"""epoch snapshots: the epoch's own parameters (epoch_params), per-participant outcomes (participant_epoch), and the
chain reads of an epoch that failed (net.snapshot_failure)

Revision ID: 0007_epoch_snapshots
Revises: 0006_rules_dirty_escrows
Create Date: 2026-12-01
"""
from alembic import op

revision = "0007_epoch_snapshots"
down_revision = "0006_rules_dirty_escrows"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE rec.epoch_params (
    epoch_index bigint NOT NULL,
    validation_params jsonb,
    bitcoin_reward_params jsonb,
    devshard_escrow_params jsonb,
    total_weight bigint,
    params_height bigint,
    params_exact boolean,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_epoch_params PRIMARY KEY (epoch_index)
);
COMMENT ON TABLE rec.epoch_params IS
  'the parameters in force for an epoch: validation_params and total_weight of its root epoch group (a snapshot '
  'taken at the epoch start), bitcoin_reward_params and devshard_escrow_params read at params_height; '
  'params_exact = false: the node had pruned the epoch''s heights (or the epoch was running) and live values '
  'stand in. Objects as the chain publishes them (decimals as {value, exponent}; fn.chain_decimal)';
CREATE TABLE rec.participant_epoch (
    epoch_index bigint NOT NULL,
    participant text NOT NULL,
    weight bigint,
    confirmation_weight bigint,
    inference_count bigint,
    missed_requests bigint,
    validated_inferences bigint,
    invalidated_inferences bigint,
    earned_coins numeric(20,0),
    rewarded_coins numeric(20,0),
    burned_coins numeric(20,0),
    excluded_reason text,
    excluded_height bigint,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_participant_epoch PRIMARY KEY (epoch_index, participant)
);
COMMENT ON TABLE rec.participant_epoch IS
  'per participant and epoch: weights of the root epoch group, the chain''s epoch_performance_summary, and the '
  'exclusion (excluded_participants) if any';
CREATE TABLE net.snapshot_failure (
    source text PRIMARY KEY,
    epoch_index bigint NOT NULL,
    what text NOT NULL,
    model_id text,
    participant text,
    host text,
    url text,
    error text NOT NULL,
    transient boolean NOT NULL,
    attempts integer NOT NULL DEFAULT 1,
    first_at timestamptz NOT NULL DEFAULT now(),
    last_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_snapshot_failure_what CHECK (what IN ('root', 'model', 'params', 'excluded', 'participant'))
);
COMMENT ON TABLE net.snapshot_failure IS
  'chain reads of an epoch''s snapshot that failed and have not succeeded since (a success deletes the row); '
  'source is the api.ingest_status source snapshot:<E>:<what>[:<model or participant>]';
CREATE INDEX ix_snapshot_failure_epoch_index ON net.snapshot_failure (epoch_index);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    # the views reading these tables are dropped and recreated by indexer.db.migrate
    op.execute("DROP VIEW IF EXISTS api.epochs")
    op.execute("DROP TABLE IF EXISTS net.snapshot_failure, rec.participant_epoch, rec.epoch_params")

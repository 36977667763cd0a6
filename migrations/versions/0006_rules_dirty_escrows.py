"""rules: escrow-level dirty marks, so a late record re-evaluates its escrow's findings, not its whole epoch's

Revision ID: 0006_rules_dirty_escrows
Revises: 0005_rules_epoch_paths
Create Date: 2026-11-30
"""
from alembic import op

revision = "0006_rules_dirty_escrows"
down_revision = "0005_rules_epoch_paths"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE rules.dirty_epoch ADD COLUMN whole boolean NOT NULL DEFAULT true;
COMMENT ON COLUMN rules.dirty_epoch.whole IS
  'true: an epoch-level input changed (snapshot, rule version, an explicit request): every escrow is re-evaluated; '
  'false: only the escrows in rules.dirty_escrow, then the epoch-wide findings';
CREATE TABLE rules.dirty_escrow (
    escrow_id text NOT NULL,
    epoch_index bigint NOT NULL,
    CONSTRAINT pk_dirty_escrow PRIMARY KEY (escrow_id)
);
COMMENT ON TABLE rules.dirty_escrow IS 'escrows replayed since the rules last evaluated them';
CREATE INDEX ix_dirty_escrow_epoch_index ON rules.dirty_escrow (epoch_index);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS rules.dirty_escrow")
    op.execute("ALTER TABLE rules.dirty_epoch DROP COLUMN IF EXISTS whole")

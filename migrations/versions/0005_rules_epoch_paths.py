"""rules: epoch-scoped access paths for re-evaluating one dirty epoch

Revision ID: 0005_rules_epoch_paths
Revises: 0004_epoch_state
Create Date: 2026-11-30
"""
from alembic import op

revision = "0005_rules_epoch_paths"
down_revision = "0004_epoch_state"
branch_labels = None
depends_on = None

UPGRADE = """
-- the challenge counterfactual reads an epoch's challenged inferences (~0.5%); without this it filters every
-- inference of the epoch. Replay COPYs few challenged rows, so the index costs it next to nothing.
CREATE INDEX ix_inference_epoch_index_challenged ON replay.inference (epoch_index) WHERE challenged_nonce IS NOT NULL;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS replay.ix_inference_epoch_index_challenged")

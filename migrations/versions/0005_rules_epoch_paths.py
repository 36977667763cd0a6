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
-- one walk over an escrow's Finishes bounds what later rules must look up per inference: only escrows that served
-- above their limit are walked for suspects, and a timeout needs its sibling probe only if some Finish could qualify
ALTER TABLE rules.escrow_limit ADD COLUMN max_input_tokens bigint, ADD COLUMN max_served_tokens bigint;
COMMENT ON COLUMN rules.escrow_limit.max_input_tokens IS 'largest input_tokens of any Finish of the escrow';
COMMENT ON COLUMN rules.escrow_limit.max_served_tokens IS 'largest input_tokens + output_tokens of any Finish';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE rules.escrow_limit DROP COLUMN IF EXISTS max_input_tokens, "
               "DROP COLUMN IF EXISTS max_served_tokens")
    op.execute("DROP INDEX IF EXISTS replay.ix_inference_epoch_index_challenged")

"""delegation params: the governance delegation_params read with the epoch's other params (rec.epoch_params)

From chain v0.2.14 on, CalculateParticipantBitcoinRewardsWithTransfers moves a share of a delegating host's reward
weight to its delegatee (delegation_params.delegation_share, 0.05 on mainnet) and removes refusal and
no-participation penalties from it, after the downtime test. The share is what the restitution report needs to
say what a delegating host would have received (fn.delegated_reward_weight); the poller reads it from the same
/params response as bitcoin_reward_params.

Revision ID: 0028_delegation_params
Revises: 0027_reward_weight_inputs
Create Date: 2026-12-05
"""
from alembic import op

revision = "0028_delegation_params"
down_revision = "0027_reward_weight_inputs"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE rec.epoch_params ADD COLUMN delegation_params jsonb;
COMMENT ON COLUMN rec.epoch_params.delegation_params IS
  'the module''s delegation_params read at params_height (delegation_share, refusal_penalty, '
  'no_participation_penalty, ... as published; decimals as {value, exponent}); NULL = not captured';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    # the views reading this column are dropped and recreated by indexer.db.migrate
    op.execute("ALTER TABLE rec.epoch_params DROP COLUMN IF EXISTS delegation_params")

"""reward weight inputs: the root group's confirmation_weight_scales (rec.epoch_params) and each host's raw
confirmation weight from the model sub-groups (rec.participant_epoch), which the chain's reward rule rescales by

CalculateParticipantBitcoinRewards pays on an effective weight that depends on the chain version: v0.2.12 caps the
confirmation weight at the full weight and rescales it by weight / raw total when the weight is below the raw
(coefficient-weighted, pre-confirmation) total; v0.2.13 on pays full weight when the epoch's
confirmation_weight_scales are empty and the rescaled weight otherwise (fn.reward_weight). Both inputs come from
reads the poller already makes (the root and the model sub-groups of epoch_group_data).

Revision ID: 0027_reward_weight_inputs
Revises: 0022_final_without_height
Create Date: 2026-12-05
"""
from alembic import op

revision = "0027_reward_weight_inputs"
down_revision = "0022_final_without_height"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE rec.epoch_params ADD COLUMN confirmation_weight_scales jsonb;
COMMENT ON COLUMN rec.epoch_params.confirmation_weight_scales IS
  'the root group''s confirmation_weight_scales keyed by model_id (each entry as published without model_id); '
  '{} = the chain published an empty list (reward on full weight, chain v0.2.13 on); NULL = not captured';
ALTER TABLE rec.participant_epoch ADD COLUMN raw_confirmation_weight bigint;
COMMENT ON COLUMN rec.participant_epoch.raw_confirmation_weight IS
  'the host''s confirmation_weight in the epoch''s model sub-groups: the coefficient-weighted sum of its ML-node '
  'PoC weights before confirmation PoC, the raw total the reward rescales by (fn.reward_weight); NULL = not captured';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    # the views reading these columns are dropped and recreated by indexer.db.migrate
    op.execute("ALTER TABLE rec.participant_epoch DROP COLUMN IF EXISTS raw_confirmation_weight")
    op.execute("ALTER TABLE rec.epoch_params DROP COLUMN IF EXISTS confirmation_weight_scales")

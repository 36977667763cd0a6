"""poller: per-epoch finality state (open → settling → final) and per-escrow progress watchdog

Revision ID: 0004_epoch_state
Revises: 0003_network
Create Date: 2026-11-29
"""
from alembic import op

revision = "0004_epoch_state"
down_revision = "0003_network"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE net.epoch_state (
    epoch_index bigint PRIMARY KEY,
    state text NOT NULL,
    escrows integer NOT NULL DEFAULT 0,
    escrows_final integer NOT NULL DEFAULT 0,
    stats_digest text,
    stats_stable_polls integer NOT NULL DEFAULT 0,
    reason text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    final_at timestamptz,
    CONSTRAINT ck_epoch_state_state CHECK (state IN ('open', 'settling', 'final'))
);
COMMENT ON TABLE net.epoch_state IS 'poller finality per epoch: open (current), settling (escrows or host epoch stats '
    'may still change; re-polled every cycle), final (all escrows settled and captured and stats stable on two '
    'consecutive polls, or pruned: reason says which)';
CREATE TABLE net.progress (
    source text PRIMARY KEY,
    source_position bigint,
    cursor_position bigint,
    stalled_cycles integer NOT NULL DEFAULT 0,
    stalled_since timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE net.progress IS 'progress watchdog: the source''s position (e.g. a host''s shard nonce) beside our '
    'cursor; stalled_cycles counts consecutive cycles in which the source was ahead and the cursor did not move';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS net.progress, net.epoch_state")

"""replay.escrow_verification.crashes: how many verifications of the row crashed in a row

A verification that raised instead of answering keeps no evidence digest and says "the verifier failed: …" (a warning
alert). The replay pass marks such a row again (indexer.replay.verifier.mark_stale_verifications) until it has
crashed MAX_CRASHES times in a row, so a transient crash (out of memory) is retried on final escrows too, and a
verifier bug on some served bytes is not retried for ever. Internal: no api view shows it.

Revision ID: 0045_verification_crashes
Revises: 0044_awaited_payloads
Create Date: 2026-12-05
"""
from alembic import op

revision = "0045_verification_crashes"
down_revision = "0044_awaited_payloads"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE replay.escrow_verification ADD COLUMN crashes integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN replay.escrow_verification.crashes IS
  'consecutive verifications of this escrow that crashed (the row''s failure starts ''the verifier failed: ''); '
  '0 once one answers; the replay pass retries a crashed row while this is below MAX_CRASHES '
  '(indexer.replay.verifier)';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE replay.escrow_verification DROP COLUMN crashes")

"""replay.escrow_verification.failed_check may name 'records': the tx records the replay read contradict the escrow's
verified signed log (indexer.verify.txrecords), so the row's level is none

Revision ID: 0052_records_check
Revises: 0051_failure_retention
Create Date: 2026-12-05
"""
from alembic import op

revision = "0052_records_check"
down_revision = "0051_failure_retention"
branch_labels = None
depends_on = None

_CONSTRAINT = "escrow_verification_failed_check_check"


def _checks(names: str) -> str:
    return f"""
ALTER TABLE replay.escrow_verification DROP CONSTRAINT {_CONSTRAINT};
ALTER TABLE replay.escrow_verification ADD CONSTRAINT {_CONSTRAINT} CHECK (failed_check IN ({names}));
"""


UPGRADE = _checks("'signed', 'replayed', 'settled', 'records'") + """
COMMENT ON TABLE replay.escrow_verification IS
  'per escrow, how far its log was verified: level none < signed (every diff''s user signature recovers to the '
  'creator) < replayed (every signed post_state_root recomputed) < settled (the final settlement-phase root is the '
  'settled one and the settlement''s host signatures reach quorum); failed_check/failed_nonce/failure name the first '
  'check that did not pass, or why it could not be made (failure without failed_check); failed_check records: the '
  'tx records the replay read are not the verified log''s txs, so the level is none whatever the log reached';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("UPDATE replay.escrow_verification SET failed_check = NULL WHERE failed_check = 'records'")
    op.execute(_checks("'signed', 'replayed', 'settled'"))

"""replay.escrow_verification.retry_after and crash_digest: a crashed verification waits before it is tried again

A verification that raised is tried again only once ``retry_after`` has passed (a delay that doubles with each crash
in a row: indexer.replay.verifier.retry_delay), and not at all while the evidence it crashed on (``crash_digest``)
is unchanged and the crashes reached MAX_CRASHES. api.escrow_verification shows both the count and the time.

Revision ID: 0056_verification_backoff
Revises: 0052_records_check
Create Date: 2026-12-05
"""
from alembic import op

revision = "0056_verification_backoff"
down_revision = "0052_records_check"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE replay.escrow_verification ADD COLUMN retry_after timestamptz, ADD COLUMN crash_digest text;
COMMENT ON COLUMN replay.escrow_verification.retry_after IS
  'a crashed verification (crashes > 0): not tried again before this time (the delay doubles with each crash in a '
  'row); null when no retry is due (the row answered, or crashed MAX_CRASHES times: indexer.replay.verifier)';
COMMENT ON COLUMN replay.escrow_verification.crash_digest IS
  'a crashed verification: the digest of the evidence it crashed on (evidence_digest stays null); an escrow replayed '
  'again with the same evidence waits for retry_after, new evidence is checked at once';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE replay.escrow_verification DROP COLUMN retry_after, DROP COLUMN crash_digest")

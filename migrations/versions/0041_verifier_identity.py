"""replay.escrow_verification.verifier: the identity of the checks that wrote each row

A hash of the verify modules' source with the ported protocol versions (indexer.replay.verifier): every replay pass
marks the escrows whose row another identity wrote, so a fix to the checks re-checks existing rows, final escrows
included. Rows written before this column have none and are checked again once.

Revision ID: 0041_verifier_identity
Revises: 0040_warm_key_capture
Create Date: 2026-12-05
"""
from alembic import op

revision = "0041_verifier_identity"
down_revision = "0040_warm_key_capture"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE replay.escrow_verification ADD COLUMN verifier text;
CREATE INDEX ix_escrow_verification_verifier ON replay.escrow_verification (verifier);
COMMENT ON COLUMN replay.escrow_verification.verifier IS
  'the verifier that wrote the row (a hash of the checks'' source and the ported session rules); a row of another '
  'verifier is checked again at the next replay pass; null: written before the identity was stored';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP INDEX replay.ix_escrow_verification_verifier; "
               "ALTER TABLE replay.escrow_verification DROP COLUMN verifier")

"""verification digest: which evidence an escrow's verification row was computed from

replay.escrow_verification.evidence_digest is an md5 over what the checks read (the escrow record's session inputs,
every signed diff with its source, the settlement, the epoch's devshard_escrow_params) and the verifier's own
version. The replay re-runs an escrow whenever any of its records changes; the verification stage re-checks it only
when this digest differs, so a replay caused by a tx record, or `indexer replay --all`, does not pay for the
signature recoveries and roots again.

Revision ID: 0030_verification_digest
Revises: 0029_evidence_records
Create Date: 2026-12-05
"""
from alembic import op

revision = "0030_verification_digest"
down_revision = "0029_evidence_records"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE replay.escrow_verification ADD COLUMN evidence_digest text;
COMMENT ON COLUMN replay.escrow_verification.evidence_digest IS
  'md5 of the evidence and verifier version the row was computed from (indexer.replay.verification); NULL = '
  'computed before digests, re-checked at the next replay';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE replay.escrow_verification DROP COLUMN IF EXISTS evidence_digest")

"""escrow record: the rest of the session config an escrow was created with (DevshardEscrow fields 10-12)

- rec.escrow.max_nonce: the most nonces the session may reach (the chain refuses a settlement past it);
- rec.escrow.refusal_timeout, rec.escrow.execution_timeout: seconds; the v5 session rules seal a Finished record
  after the seal grace plus execution_timeout, so its roots depend on it.

As the chain publishes them (0 included: "zero values fall back to compiled defaults"); NULL = not captured.

Revision ID: 0033_escrow_timeouts
Revises: 0029_evidence_records
Create Date: 2026-12-05
"""
from alembic import op

revision = "0033_escrow_timeouts"
down_revision = "0035_refusal_parse_version_index"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE rec.escrow ADD COLUMN max_nonce bigint;
ALTER TABLE rec.escrow ADD COLUMN refusal_timeout bigint;
ALTER TABLE rec.escrow ADD COLUMN execution_timeout bigint;
COMMENT ON COLUMN rec.escrow.max_nonce IS
  'DevshardEscrow.max_nonce: the most nonces the session may reach (a settlement past it is refused); as published, '
  '0 = the compiled default; NULL = not captured';
COMMENT ON COLUMN rec.escrow.refusal_timeout IS
  'DevshardEscrow.refusal_timeout (seconds) and execution_timeout (seconds; the v5 rules seal a Finished record after '
  'the seal grace plus it): as published, 0 = the compiled default; NULL = not captured';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    for column in ("execution_timeout", "refusal_timeout", "max_nonce"):
        op.execute(f"ALTER TABLE rec.escrow DROP COLUMN IF EXISTS {column}")

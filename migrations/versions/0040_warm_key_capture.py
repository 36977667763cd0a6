"""rec.warm_key: the height the grants were read at, whether that was the epoch's own, and participants with none

Verification accepts a host signature from a warm key only as the grants stood in the escrow's epoch. The grants
are read as of the epoch's end height while a node keeps it (read_exact true, read_height that height); once the
node has pruned it only the live grants can be read (read_exact false, read_height null): a signature only they
could authorise is reported not checked. A participant whose grants were read and listed none gets one row with an
empty grantee, so "not captured yet" (no row) and "captured, no grants" differ.

Revision ID: 0040_warm_key_capture
Revises: 0036_ingest_index_floor
Create Date: 2026-12-05
"""
from alembic import op

revision = "0040_warm_key_capture"
down_revision = "0036_ingest_index_floor"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE rec.warm_key ADD COLUMN read_height bigint, ADD COLUMN read_exact boolean;
COMMENT ON COLUMN rec.warm_key.read_height IS
  'the block height the grants were read at (the epoch''s end height); null when read from live values';
COMMENT ON COLUMN rec.warm_key.read_exact IS
  'true: read as of the epoch''s end height; false: the node had pruned it and live grants stand in; null: not '
  'recorded (captured before this column existed), treated as not exact';
COMMENT ON COLUMN rec.warm_key.grantee IS
  'the warm key''s address; empty: the participant''s grants were read and listed none';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE rec.warm_key DROP COLUMN read_exact, DROP COLUMN read_height")

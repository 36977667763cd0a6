"""warm key read failures: net.snapshot_failure accepts what = 'warm_keys'

The epoch capture reads each participant's warm-key grants (indexer.sources.gonka.snapshots) and names a failed
read ``snapshot:<E>:warm_keys:<participant>``, like every other snapshot read; the check on ``what`` did not list
it, so the first failed grants read (a node without the route, a 5xx) failed the cycle's commit instead of being
recorded.

Revision ID: 0046_warm_key_read_failures
Revises: 0045_verification_crashes
Create Date: 2026-12-05
"""
from alembic import op

revision = "0046_warm_key_read_failures"
down_revision = "0045_verification_crashes"
branch_labels = None
depends_on = None

WHATS = "'root', 'model', 'params', 'excluded', 'participant'"


def upgrade() -> None:
    op.execute("ALTER TABLE net.snapshot_failure DROP CONSTRAINT ck_snapshot_failure_what, "
               f"ADD CONSTRAINT ck_snapshot_failure_what CHECK (what IN ({WHATS}, 'warm_keys'))")


def downgrade() -> None:
    op.execute("DELETE FROM net.snapshot_failure WHERE what = 'warm_keys'")
    op.execute("ALTER TABLE net.snapshot_failure DROP CONSTRAINT ck_snapshot_failure_what, "
               f"ADD CONSTRAINT ck_snapshot_failure_what CHECK (what IN ({WHATS}))")

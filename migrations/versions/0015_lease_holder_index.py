"""net.lease without its index on holder

No statement looks leases up by holder alone: taking, renewing, fencing and releasing all name their resources
(the primary key). The index only made every take by a new holder (each poller run is one) a non-HOT update.

Revision ID: 0015_lease_holder_index
Revises: 0014_partitioned_history
Create Date: 2026-12-01
"""
from alembic import op

revision = "0015_lease_holder_index"
down_revision = "0014_partitioned_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX net.lease_holder")


def downgrade() -> None:
    op.execute("CREATE INDEX lease_holder ON net.lease (holder)")

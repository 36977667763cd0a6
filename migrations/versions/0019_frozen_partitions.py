"""net.frozen_partition: the epoch partitions that `indexer run` has frozen once their epoch was settled

An epoch's partitions stop changing once the poller is done with it (final, or past the chain's pruning window), and
the archive keeps them for years. Their rows still carry the transaction ids that wrote them, so one day (after
autovacuum_freeze_max_age transactions: weeks for a poller that commits hundreds of times a cycle) autovacuum must
rewrite every page of every such partition at once to freeze them. Freezing each epoch once, right after it
settles, makes that later pass skip all of it (the visibility map marks the pages all-frozen).
indexer.poller.freezing does it and records each partition here, by the relation's oid and name: a partition
dropped (indexer archive) and made again (ingest of the archived files) is a new relation and is frozen again.

Revision ID: 0019_frozen_partitions
Revises: 0018_last_epoch_partition
Create Date: 2026-12-04
"""
from alembic import op

revision = "0019_frozen_partitions"
down_revision = "0018_last_epoch_partition"
branch_labels = None
depends_on = None


FROZEN_PARTITION = """
CREATE TABLE net.frozen_partition (
    relid oid NOT NULL,
    relname text NOT NULL,
    epoch_index bigint NOT NULL,
    frozen_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_frozen_partition PRIMARY KEY (relid)
);
COMMENT ON TABLE net.frozen_partition IS
  'epoch partitions frozen (VACUUM FREEZE) after their epoch settled; a relation of another name under the same '
  'oid is not the one that was frozen';
"""


def upgrade() -> None:
    op.execute(FROZEN_PARTITION)


def downgrade() -> None:
    op.execute("DROP TABLE net.frozen_partition")

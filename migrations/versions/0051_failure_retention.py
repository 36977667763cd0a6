"""net.failure keeps the poller's retention: rows older than it are deleted at the end of each cycle, and counted by
source class in net.failure_pruned, so indexer_source_errors_total (rows kept + rows pruned) never goes down

Revision ID: 0051_failure_retention
Revises: 0049_identifier_collation
Create Date: 2026-12-05
"""
from alembic import op

revision = "0051_failure_retention"
down_revision = "0049_identifier_collation"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE net.failure_pruned (
    source_kind text COLLATE "C" PRIMARY KEY,
    failures bigint NOT NULL,
    last_pruned_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE net.failure_pruned IS
  'net.failure rows deleted by the poller''s retention (indexer run --archive-days), counted per source class: '
  'what /metrics adds to the rows kept so that indexer_source_errors_total never goes down';
COMMENT ON COLUMN net.failure_pruned.source_kind IS 'the source class of the deleted rows (net.failure.source_kind)';
COMMENT ON COLUMN net.failure_pruned.failures IS 'how many rows of that class the retention has deleted in all';
COMMENT ON COLUMN net.failure_pruned.last_pruned_at IS 'when rows of that class were last deleted';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS net.failure_pruned")

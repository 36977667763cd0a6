"""rec.quarantine.resolved_at, resolved_source_id, resolved_line: a quarantined line a later valid record superseded

A quarantine row is kept (the history of what was rejected), and marked resolved once a later load brings a valid
record in its place: the same record, or the same line of the same input corrected (indexer.load.resolved). The
partial index finds the open rows, so a load checks for them with one probe per batch.

Revision ID: 0057_quarantine_resolved
Revises: 0056_verification_backoff
Create Date: 2026-12-05
"""
from alembic import op

revision = "0057_quarantine_resolved"
down_revision = "0056_verification_backoff"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE rec.quarantine ADD COLUMN resolved_at timestamptz, ADD COLUMN resolved_source_id bigint,
  ADD COLUMN resolved_line bigint;
COMMENT ON COLUMN rec.quarantine.resolved_at IS
  'when a later valid record superseded this line (the same record stored, or the same line of the same input '
  'corrected: indexer.load.resolved); null while it is open';
COMMENT ON COLUMN rec.quarantine.resolved_source_id IS 'the source (rec.source) of the valid line that resolved it';
COMMENT ON COLUMN rec.quarantine.resolved_line IS 'the line number of the valid line that resolved it';
CREATE INDEX ix_quarantine_open ON rec.quarantine (kind) WHERE resolved_at IS NULL;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP INDEX rec.ix_quarantine_open")
    op.execute("ALTER TABLE rec.quarantine DROP COLUMN resolved_at, DROP COLUMN resolved_source_id, "
               "DROP COLUMN resolved_line")

"""rec.quarantine.resolved_at, resolved_source_id, resolved_line: a quarantined line a later valid record
superseded; rec.participant_epoch.status, status_height: the participant's status as the chain gave it

A quarantine row is kept (the history of what was rejected), and marked resolved once a later load brings a valid
record in its place: the same record, or the same line of the same input corrected (indexer.load.resolved). The
partial index finds the open rows, so a load checks for them with one probe per batch.

A participant's status (the inference module's ParticipantStatus: ACTIVE, INACTIVE, INVALID, RAMPING, …) is read
as of the epoch's end height (indexer.sources.gonka.snapshots) and kept as the chain names it, a value the indexer
does not know included; null when not read.

Revision ID: 0057_quarantine_status
Revises: 0056_verification_backoff
Create Date: 2026-12-05
"""
from alembic import op

revision = "0057_quarantine_status"
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
CREATE INDEX ix_quarantine_open ON rec.quarantine (source_id) WHERE resolved_at IS NULL;
ALTER TABLE rec.participant_epoch ADD COLUMN status text, ADD COLUMN status_height bigint;
COMMENT ON COLUMN rec.participant_epoch.status IS
  'the participant''s status (participant/{address}.status) as of status_height, as the chain names it (ACTIVE, '
  'INACTIVE, INVALID, RAMPING, UNSPECIFIED, or a name or number the indexer does not know); null when not read';
COMMENT ON COLUMN rec.participant_epoch.status_height IS 'the block height status was read at (the epoch''s end)';
ALTER TABLE net.snapshot_failure DROP CONSTRAINT ck_snapshot_failure_what,
  ADD CONSTRAINT ck_snapshot_failure_what
  CHECK (what IN ('root', 'model', 'params', 'excluded', 'participant', 'warm_keys', 'status'));
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DELETE FROM net.snapshot_failure WHERE what = 'status'")
    op.execute("ALTER TABLE net.snapshot_failure DROP CONSTRAINT ck_snapshot_failure_what, ADD CONSTRAINT "
               "ck_snapshot_failure_what CHECK (what IN ('root', 'model', 'params', 'excluded', 'participant', "
               "'warm_keys'))")
    op.execute("ALTER TABLE rec.participant_epoch DROP COLUMN status, DROP COLUMN status_height")
    op.execute("DROP INDEX rec.ix_quarantine_open")
    op.execute("ALTER TABLE rec.quarantine DROP COLUMN resolved_at, DROP COLUMN resolved_source_id, "
               "DROP COLUMN resolved_line")

"""rec.quarantine.record_key: the key of the record a quarantined line names, so that resolution matches open rows
by key in SQL

The key is the record's key columns as text, each value as the typer would store it (indexer.load.resolved
.record_key); an empty array when the line names no key that could be stored (it did not parse, an unknown kind, a
key field that does not type). Null means not read yet: the rows quarantined before this revision, and each batch's
new rows until the batch reads them (indexer.load.resolved.read_keys, once per row). Two partial indexes over the
open rows: one by kind and first key value (the batch's escrows or epochs), one for the rows whose key is not read;
and the index of open rows by source gains the line, so that a matched row is found again by its whole key however
many rows of its source are open. `kind` is indexed now, so it compares as bytes like every indexed identifier
(migration 0049): our views are dropped for the ALTER and re-created by `indexer migrate` at the end.

Revision ID: 0061_quarantine_key
Revises: 0057_quarantine_status
Create Date: 2026-12-06
"""
from alembic import op

revision = "0061_quarantine_key"
down_revision = "0057_quarantine_status"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE rec.quarantine ALTER COLUMN kind TYPE text COLLATE "C", ADD COLUMN record_key text[] COLLATE "C";
COMMENT ON COLUMN rec.quarantine.record_key IS
  'the key of the record the line names, each key field as text the way the typer stores it; empty when the line '
  'names no storable key; null until read (indexer.load.resolved)';
CREATE INDEX ix_quarantine_open_key ON rec.quarantine (kind, (record_key[1])) WHERE resolved_at IS NULL;
CREATE INDEX ix_quarantine_key_unread ON rec.quarantine (source_id)
  WHERE resolved_at IS NULL AND record_key IS NULL;
DROP INDEX rec.ix_quarantine_open;
CREATE INDEX ix_quarantine_open ON rec.quarantine (source_id, line) WHERE resolved_at IS NULL;
"""


def _remove_views() -> None:
    from indexer.db import replaceable
    from indexer.db.schema import replaceable_object_files

    replaceable.remove_our_views(op.get_bind(), replaceable_object_files())


def upgrade() -> None:
    _remove_views()
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP INDEX rec.ix_quarantine_open")
    op.execute("CREATE INDEX ix_quarantine_open ON rec.quarantine (source_id) WHERE resolved_at IS NULL")
    op.execute("DROP INDEX rec.ix_quarantine_key_unread")
    op.execute("DROP INDEX rec.ix_quarantine_open_key")
    op.execute("ALTER TABLE rec.quarantine DROP COLUMN record_key")
    _remove_views()
    op.execute('ALTER TABLE rec.quarantine ALTER COLUMN kind TYPE text COLLATE "default"')

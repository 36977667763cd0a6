"""network: a source's kind and key as columns of their own (net.cursor, net.failure), so no view, alert or metric
takes the source string apart itself

Revision ID: 0011_source_parts
Revises: 0010_chain_versions
Create Date: 2026-11-30
"""
from alembic import op

revision = "0011_source_parts"
down_revision = "0010_chain_versions"
branch_labels = None
depends_on = None

# A source is '<kind>' or '<kind>:<key>' (chain, poll, epoch:410, escrow:1971, escrow-final:1971, host:<address>,
# snapshot:410:model:<id>, rpc:settled). The split is defined here once, as generated columns.
_PARTS = """
    ADD COLUMN source_kind text GENERATED ALWAYS AS (split_part(source, ':', 1)) STORED,
    ADD COLUMN source_key text GENERATED ALWAYS AS
        (CASE WHEN position(':' IN source) > 0 THEN substring(source FROM position(':' IN source) + 1) END) STORED"""

UPGRADE = f"""
ALTER TABLE net.cursor {_PARTS};
ALTER TABLE net.failure {_PARTS};
CREATE INDEX ix_cursor_source_kind_source_key ON net.cursor (source_kind, source_key);
COMMENT ON COLUMN net.cursor.source_kind IS 'what the source is: chain, poll, epoch, escrow, escrow-final, host, snapshot, rpc';
COMMENT ON COLUMN net.cursor.source_key IS 'which one: the epoch, escrow id, host address, ... (null for chain, poll)';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("""
DROP INDEX net.ix_cursor_source_kind_source_key;
ALTER TABLE net.cursor DROP COLUMN source_kind, DROP COLUMN source_key;
ALTER TABLE net.failure DROP COLUMN source_kind, DROP COLUMN source_key;
""")

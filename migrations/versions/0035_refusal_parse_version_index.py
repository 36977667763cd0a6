"""rules.refusal_parse by parser version: the rules stage's check for parses made by an older parser (every run, in
every poll cycle and ingest) reads the index, not the whole table, whose size follows the history's refusals

Revision ID: 0035_refusal_parse_version_index
Revises: 0028_delegation_params
Create Date: 2026-12-05
"""
from alembic import op

revision = "0035_refusal_parse_version_index"
down_revision = "0031_warm_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS ix_refusal_parse_parser_version ON rules.refusal_parse (parser_version)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS rules.ix_refusal_parse_parser_version")

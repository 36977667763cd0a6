"""rules.challenge.suspect_invalid_weight may be null: unknown when the challenged record's governance limit is
unknown (sql/rules/50_challenges.sql), so that the suspects' weight is not shown as 0 and the outcome without them as
unchanged. Rows stored before this revision keep their 0 until their epoch is evaluated again (RULE_VERSION 3 makes
every stored epoch stale). No view reads the constraint, so none is dropped.

Revision ID: 0062_unknown_suspect_weight
Revises: 0061_quarantine_key
Create Date: 2026-12-06
"""
from alembic import op

revision = "0062_unknown_suspect_weight"
down_revision = "0061_quarantine_key"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE rules.challenge ALTER COLUMN suspect_invalid_weight DROP NOT NULL")


def downgrade() -> None:
    # an unknown weight has no place in the older column: 0, the value the older rules wrote for it
    op.execute("UPDATE rules.challenge SET suspect_invalid_weight = 0 WHERE suspect_invalid_weight IS NULL")
    op.execute("ALTER TABLE rules.challenge ALTER COLUMN suspect_invalid_weight SET NOT NULL")

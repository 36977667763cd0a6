"""replay.rejected_tx: drop the index on (escrow_id, inference_id), which no query uses

Of the indexes the ingest writes (the rec tx tables and the replay tables, docs/performance.md lists them with the
query each serves), this is the one nothing reads: api.replay_rejections joins rec.escrow on escrow_id, and a
lookup of one escrow's rejections (with or without an inference id) is a range of the primary key
(escrow_id, ordinal). The replay rewrites an escrow's rejections on every replay of it, so the index was paid for
on every write.

Revision ID: 0036_ingest_index_floor
Revises: 0029_evidence_records
Create Date: 2026-12-05
"""
from alembic import op

revision = "0036_ingest_index_floor"
down_revision = "0033_escrow_timeouts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX replay.ix_rejected_tx_escrow_id_inference_id")


def downgrade() -> None:
    op.execute("CREATE INDEX ix_rejected_tx_escrow_id_inference_id ON replay.rejected_tx (escrow_id, inference_id)")

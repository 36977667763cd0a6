"""rec.start_tx: the sibling lookup's index is a hash of (escrow_id, prompt_hash) instead of a btree on both

The rules find an inference's siblings (the same escrow, the same signed prompt hash: fn.sibling_finishes) by equality
only, so the index needs no order. A btree entry carries the escrow id and the 64-digit hash and is placed in order on
every insert, the largest index cost of a load. A hash index entry is a 4-byte hash code, which makes the server's
COPY of the Starts about a fifth cheaper.

One expression, not a hash of prompt_hash alone: a prompt sent in many escrows (a gateway's health check) would make
every lookup read all its Starts of the epoch. The '/' between the two only keeps the expression readable; where two
pairs concatenate alike, the lookup's column equalities still decide, so results stay exact.

Revision ID: 0016_start_sibling_hash_index
Revises: 0015_lease_holder_index
Create Date: 2026-12-01
"""
from alembic import op

revision = "0016_start_sibling_hash_index"
down_revision = "0015_lease_holder_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX rec.ix_start_tx_escrow_id_prompt_hash")
    op.execute("CREATE INDEX ix_start_tx_sibling_key ON rec.start_tx USING hash ((escrow_id || '/' || prompt_hash))")


def downgrade() -> None:
    op.execute("DROP INDEX rec.ix_start_tx_sibling_key")
    op.execute("CREATE INDEX ix_start_tx_escrow_id_prompt_hash ON rec.start_tx (escrow_id, prompt_hash)")

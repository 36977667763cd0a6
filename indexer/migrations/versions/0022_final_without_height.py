"""escrows stored final without their settlement height are fetched again

A poll cycle reads the settlements once, at its start; an escrow that settled after that read was stored settled and
final (an ``escrow-final:<id>`` cursor) without ``settled_height`` in ``rec.escrow.extra``, and never fetched again,
so the restitution's SPRT ran it out of settlement order (api.restitution_steps). The poller now looks such an
escrow's settlement up and keeps it not final until its height is known (indexer.poller.fetch). This removes the
final mark of each escrow stored so whose epoch is not final yet, so the next cycle fetches it again (its log is
complete: one request for the escrow, one for its settlement) and stores its height. Escrows of final epochs keep
their mark: the chain has pruned them; their restitution says ``settle_heights_known = false``.

Downgrade does nothing: the poller writes the marks again.

Revision ID: 0022_final_without_height
Revises: 0020_rec_partition_statistics
Create Date: 2026-12-05
"""
from alembic import op

revision = "0022_final_without_height"
down_revision = "0020_rec_partition_statistics"
branch_labels = None
depends_on = None

UPGRADE = """
DELETE FROM net.cursor c
USING rec.escrow e
WHERE c.source = 'escrow-final:' || e.escrow_id
  AND e.settled
  AND NOT (COALESCE(e.extra, '{}'::jsonb) ? 'settled_height')
  AND NOT EXISTS (SELECT 1 FROM net.epoch_state s WHERE s.epoch_index = e.epoch_index AND s.state = 'final')
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    pass

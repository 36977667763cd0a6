"""citus ready: the one table without a key gets a replica identity, so Citus can move its shards online

Citus (docs/scale.md "The road to Citus", sql/citus/) needs, besides the tables' placement calls:
  * every PRIMARY KEY / UNIQUE constraint of a distributed table to include the distribution column: all do (the
    escrow-keyed tables lead with escrow_id; net.raw_response is distributed by its key id);
    tests/db/test_citus_static.py checks it;
  * a replica identity on every table that is updated or deleted from, because adding or rebalancing nodes copies
    shards (and reference tables) with logical replication, which refuses UPDATE/DELETE on a table without one.
    rules.suspect has no key (a voter can be named twice for one inference, so no natural one) and is deleted from
    per epoch; REPLICA IDENTITY FULL identifies its rows by all columns. On plain PostgreSQL it changes nothing
    unless wal_level = logical (then a deleted row's old values are logged in full; the table is small).

Revision ID: 0012_citus_ready
Revises: 0011_source_parts
Create Date: 2026-12-12
"""
from alembic import op

revision = "0012_citus_ready"
down_revision = "0011_source_parts"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE rules.suspect REPLICA IDENTITY FULL;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE rules.suspect REPLICA IDENTITY DEFAULT")

"""poller leases: several `indexer run` processes on one database split the work through expiring leases; the
archive's bodies stored without compression

A lease names one unit of work (``resource``: an epoch's plan, an escrow's log, a host's stats…), who holds it
and until when. A poller takes a free or expired lease with one INSERT … ON CONFLICT … WHERE expires_at < now(),
renews it while it works and releases it when done (``released_at``); a killed poller's leases expire and another
takes them over (``takeovers``, ``taken_from``).
Expiry is judged by the database clock (now()), never by a poller's own clock.

net.raw_response.body: STORAGE EXTERNAL (out of line, never compressed). The archived bodies are JSON around
base64-encoded protobuf, which pglz barely shrinks (34 MB → 35 MB uncompressed for a 100k-tx poll) while trying
cost the server more than the rest of the COPY (1.84 s → 0.83 s for those 33 MB).

Revision ID: 0013_poller_leases
Revises: 0012_citus_ready
Create Date: 2026-12-01
"""
from alembic import op

revision = "0013_poller_leases"
down_revision = "0012_citus_ready"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE net.lease (
    resource     text        PRIMARY KEY,
    holder       text        NOT NULL,
    acquired_at  timestamptz NOT NULL DEFAULT now(),
    renewed_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    released_at  timestamptz,                     -- the holder finished the work (NULL: held, or left to expire)
    takeovers    integer     NOT NULL DEFAULT 0,  -- times an expired, unreleased lease was taken by another holder
    taken_from   text                             -- the holder of the last takeover's expired lease
);
CREATE INDEX lease_holder ON net.lease (holder);
COMMENT ON TABLE net.lease IS 'Work leases of concurrent pollers: a resource is held by one poller until expires_at';
ALTER TABLE net.raw_response ALTER COLUMN body SET STORAGE EXTERNAL;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE net.raw_response ALTER COLUMN body SET STORAGE EXTENDED")
    op.execute("DROP TABLE net.lease")

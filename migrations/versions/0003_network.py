"""network sources: archived raw responses, per-source cursors, fetch failures

Revision ID: 0003_network
Revises: 0002_rules
Create Date: 2026-11-29
"""
from alembic import op

revision = "0003_network"
down_revision = "0002_rules"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE SCHEMA IF NOT EXISTS net;
CREATE TABLE net.raw_response (
    id bigserial PRIMARY KEY,
    url text NOT NULL,
    status integer NOT NULL,
    height bigint,
    fetched_at timestamptz NOT NULL DEFAULT now(),
    body bytea
);
COMMENT ON TABLE net.raw_response IS 'every HTTP response the poller received, for re-derivation after upgrades';
CREATE INDEX ix_raw_response_fetched_at ON net.raw_response (fetched_at);
CREATE TABLE net.cursor (
    source text PRIMARY KEY,
    cursor text,
    last_success_at timestamptz,
    last_error text,
    last_error_at timestamptz,
    next_retry_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE net.cursor IS 'poller progress per source (escrow:<id> = last ingested diff nonce)';
CREATE TABLE net.failure (
    id bigserial PRIMARY KEY,
    source text NOT NULL,
    url text,
    error text NOT NULL,
    transient boolean NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_failure_at ON net.failure (at);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS api.ingest_status")
    op.execute("DROP TABLE IF EXISTS net.failure, net.cursor, net.raw_response")
    op.execute("DROP SCHEMA IF EXISTS net")

"""chain versions in force: the upgrade heights of the Gonka chain (chain.upgrade) and the analyst's override per
epoch range (chain.version_override); fn.chain_version_at(epoch) reads both (sql/functions/35_restitution.sql)

Revision ID: 0010_chain_versions
Revises: 0009_alerts
Create Date: 2026-12-10
"""
from alembic import op

revision = "0010_chain_versions"
down_revision = "0009_alerts"
branch_labels = None
depends_on = None

# Seeded from docs/chain-upgrades.md: the public sources read so far give the upgrade names and release commits but
# not the activation heights (those are in the chain's upgrade module: /cosmos/upgrade/v1beta1/applied_plan/<name>),
# so every height but genesis is NULL until an operator fills it in (UPDATE chain.upgrade SET height = ...).
UPGRADES = [  # (chain_version, upgrade_name, height, source)
    ("v0.2.0", "(genesis)", 1, "genesis binary (release/v0.2.0); no upgrade plan"),
    ("v0.2.1", "(genesis)", None, "genesis binary release/v0.2.1 or a restart; height not established"),
] + [(f"v0.2.{n}", f"v0.2.{n}", None, "docs/chain-upgrades.md: upgrade plan name known, height not established")
     for n in range(2, 14)]

UPGRADE = """
CREATE SCHEMA IF NOT EXISTS chain;
CREATE TABLE chain.upgrade (
    chain_version text NOT NULL,
    upgrade_name text NOT NULL,
    height bigint,
    source text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_upgrade PRIMARY KEY (chain_version),
    CONSTRAINT ck_upgrade_height CHECK (height IS NULL OR height > 0)
);
COMMENT ON TABLE chain.upgrade IS
  'the block height at which each chain version took effect (software-upgrade plan height; NULL = not known). '
  'fn.chain_version_at(epoch) uses these unless chain.version_override covers the epoch';
CREATE TABLE chain.version_override (
    override_id bigserial,
    first_epoch bigint NOT NULL,
    last_epoch bigint,
    chain_version text NOT NULL,
    reason text NOT NULL,
    set_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_version_override PRIMARY KEY (override_id),
    CONSTRAINT ck_version_override_range CHECK (last_epoch IS NULL OR last_epoch >= first_epoch)
);
COMMENT ON TABLE chain.version_override IS
  'an analyst''s statement of the chain version in force for epochs first_epoch..last_epoch (NULL = open-ended); '
  'the newest override (set_at, then override_id) covering an epoch wins over the upgrade heights';
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    for version, name, height, source in UPGRADES:
        op.execute(
            "INSERT INTO chain.upgrade (chain_version, upgrade_name, height, source) VALUES ("
            f"'{version}', '{name}', {'NULL' if height is None else height}, '{source}')"
        )


def downgrade() -> None:
    # api views and fn functions reading these tables are dropped and recreated by indexer.db.migrate
    op.execute("DROP SCHEMA IF EXISTS chain CASCADE")

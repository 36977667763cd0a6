"""chain.upgrade: the upgrades after v0.2.13 that the public source shows (v0.2.14 … v0.2.18), heights unknown

gonka-ai/gonka has upgrade handlers for v0.2.14 … v0.2.18 (inference-chain/app/upgrades/v0_2_14 … v0_2_18; the
UpgradeName constants of v0_2_17 and v0_2_18 at ffd9dff006f6911683577d1f4eb467cb8742453b, "MUST exactly match the
on-chain governance proposal name"). Without rows for them, an epoch after one of these upgrades was attributed to
v0.2.13 on the strength of the older heights alone ('upgrade_heights'). With them and their heights unknown, such
epochs read 'assumed_newest' until an operator sets the heights. Rows an operator inserted already are kept.

Revision ID: 0017_later_chain_upgrades
Revises: 0016_start_sibling_hash_index
Create Date: 2026-12-02
"""
from alembic import op

revision = "0017_later_chain_upgrades"
down_revision = "0016_start_sibling_hash_index"
branch_labels = None
depends_on = None

SOURCE = "gonka-ai/gonka inference-chain/app/upgrades/{dir}: upgrade handler present; height not established"
LATER = [(f"v0.2.{n}", f"v0_2_{n}") for n in range(14, 19)]


def upgrade() -> None:
    for version, directory in LATER:
        op.execute("INSERT INTO chain.upgrade (chain_version, upgrade_name, height, source) "
                   f"VALUES ('{version}', '{version}', NULL, '{SOURCE.format(dir=directory)}') "
                   "ON CONFLICT (chain_version) DO NOTHING")


def downgrade() -> None:
    for version, directory in LATER:
        op.execute(f"DELETE FROM chain.upgrade WHERE chain_version = '{version}' AND height IS NULL "
                   f"AND source = '{SOURCE.format(dir=directory)}'")

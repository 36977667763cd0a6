"""warm keys: each participant's authz grantees for MsgStartInference, the keys hosts sign devshard messages with

On mainnet every host-signed devshard message (executor receipts, Finish and Validation proposer signatures, state
co-signatures) recovers to the host's warm key, never its own address (../shared/data/README.md, epoch 272). The
session rules and the chain's settlement check accept a slot's address or a key it granted
``/inference.inference.MsgStartInference`` (grantees_by_message_type), so verification needs the grants: one
rec.warm_key row per (epoch, participant, grantee), read from the chain when the epoch is captured.

Revision ID: 0031_warm_keys
Revises: 0030_verification_digest
Create Date: 2026-12-05
"""
from alembic import op

revision = "0031_warm_keys"
down_revision = "0030_verification_digest"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE rec.warm_key (
    epoch_index bigint NOT NULL,
    participant text NOT NULL,
    grantee text NOT NULL,
    pub_key text,
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    CONSTRAINT pk_warm_key PRIMARY KEY (epoch_index, participant, grantee)
);
COMMENT ON TABLE rec.warm_key IS
  'a participant''s warm key as the chain listed it when the epoch was captured (grantees_by_message_type for '
  '/inference.inference.MsgStartInference): grantee address and its public key (base64, as published); '
  'host signatures that recover to it count as the participant''s';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS rec.warm_key")

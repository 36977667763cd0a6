"""evidence records: what a third party needs to check an escrow's log as the protocol signs it

- rec.signed_diff: each diff's DiffContent bytes exactly as a host served them (base64, never a re-encoding), the
  user's signature over them, the post_state_root they carry and the host's state_hash, and which host served them;
- rec.settlement: the MsgSettleDevshardEscrow of the escrow's settlement transaction (found through the
  devshard_escrow_settled event, read from the node while it keeps the block): root, rest hash, host stats, host
  signatures, nonce, fees, version, the message bytes and the raw transaction, its hash and height;
- rec.escrow gains the creator (whose key must have signed every diff), the escrow amount (the session's opening
  balance) and the session config it was created with (token price, fees, seal grace, auto-seal interval), which
  every state root depends on;
- replay.escrow_verification: per escrow, the level the three checks reached (signed, replayed, settled), the first
  failing nonce and reason (indexer.verify, run beside the replay).

Both record tables are keyed by escrow and partitioned by epoch like the tx tables (docs/partitioning.md).

Revision ID: 0029_evidence_records
Revises: 0028_delegation_params
Create Date: 2026-12-05
"""
from alembic import op

revision = "0029_evidence_records"
down_revision = "0028_delegation_params"
branch_labels = None
depends_on = None

_BOOKKEEPING = """
    extra jsonb,
    source_id bigint NOT NULL,
    source_line bigint NOT NULL,
    revision integer NOT NULL DEFAULT 1,
    loaded_at timestamptz NOT NULL DEFAULT now(),
    amended_at timestamptz,
    epoch_index bigint NOT NULL DEFAULT -1,"""

UPGRADE = f"""
CREATE TABLE rec.signed_diff (
    escrow_id text NOT NULL,
    nonce bigint NOT NULL,
    content text NOT NULL,
    user_sig text,
    post_state_root text,
    state_hash text,
    source_host text,{_BOOKKEEPING}
    CONSTRAINT pk_signed_diff PRIMARY KEY (escrow_id, nonce, epoch_index)
) PARTITION BY RANGE (epoch_index);
COMMENT ON TABLE rec.signed_diff IS
  'each diff of an escrow''s log as a host served it: content = the serialized DiffContent the user signed '
  '(standard base64 of the exact served bytes), user_sig (hex, 65-byte r||s||v), post_state_root (hex, the root '
  'the content carries), state_hash (hex, the serving host''s own root), source_host (who served it)';

CREATE TABLE rec.settlement (
    escrow_id text NOT NULL,
    tx_hash text,
    height bigint,
    settler text,
    state_root text,
    rest_hash text,
    nonce bigint,
    fees numeric(20,0),
    state_root_and_protocol_version text,
    host_stats jsonb,
    signatures jsonb,
    msg text,
    tx_raw text,{_BOOKKEEPING}
    CONSTRAINT pk_settlement PRIMARY KEY (escrow_id, epoch_index)
) PARTITION BY RANGE (epoch_index);
COMMENT ON TABLE rec.settlement IS
  'the escrow''s settlement transaction as the chain accepted it: MsgSettleDevshardEscrow fields (state_root, '
  'rest_hash, nonce, fees, version, host_stats by slot, signatures by slot as hex), msg = the message''s exact '
  'bytes (base64), tx_raw = the broadcast TxRaw (base64; sha256 of it is tx_hash), height = the block';

ALTER TABLE rec.escrow ADD COLUMN creator text;
ALTER TABLE rec.escrow ADD COLUMN amount numeric(20,0);
COMMENT ON COLUMN rec.escrow.creator IS 'the escrow''s creator (the user whose key signs every diff); NULL = not captured';
COMMENT ON COLUMN rec.escrow.amount IS 'the escrow amount in ngonka (the session''s opening balance); NULL = not captured';
ALTER TABLE rec.escrow ADD COLUMN token_price numeric(20,0);
ALTER TABLE rec.escrow ADD COLUMN create_devshard_fee numeric(20,0);
ALTER TABLE rec.escrow ADD COLUMN fee_per_nonce numeric(20,0);
ALTER TABLE rec.escrow ADD COLUMN inference_seal_grace_nonces bigint;
ALTER TABLE rec.escrow ADD COLUMN inference_seal_grace_seconds bigint;
ALTER TABLE rec.escrow ADD COLUMN auto_seal_every_n_nonces bigint;
COMMENT ON COLUMN rec.escrow.token_price IS
  'the session config the escrow was created with (DevshardEscrow): token_price, create_devshard_fee, fee_per_nonce, '
  'inference_seal_grace_nonces/_seconds, auto_seal_every_n_nonces; every state root depends on them. NULL = not captured';

CREATE TABLE replay.escrow_verification (
    escrow_id text NOT NULL,
    epoch_index bigint,
    level text NOT NULL CHECK (level IN ('none', 'signed', 'replayed', 'settled')),
    nonces_checked bigint NOT NULL DEFAULT 0,
    failed_check text CHECK (failed_check IN ('signed', 'replayed', 'settled')),
    failed_nonce bigint,
    failure text,
    source_host text,
    protocol_version text,
    settlement_tx_hash text,
    settlement_height bigint,
    verified_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_escrow_verification PRIMARY KEY (escrow_id)
);
COMMENT ON TABLE replay.escrow_verification IS
  'per escrow, how far its log was verified: level none < signed (every diff''s user signature recovers to the '
  'creator) < replayed (every signed post_state_root recomputed) < settled (the final settlement-phase root is the '
  'settled one and the settlement''s host signatures reach quorum); failed_check/failed_nonce/failure name the first '
  'check that did not pass, or why it could not be made (failure without failed_check)';
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    for table in ("rec.signed_diff", "rec.settlement"):  # the safety net and the escrows not yet loaded (0014)
        name = table.replace(".", "_")
        op.execute(f"CREATE TABLE part.{name}_default PARTITION OF {table} DEFAULT")
        op.execute(f"CREATE TABLE part.{name}_unassigned PARTITION OF {table} FOR VALUES FROM (MINVALUE) TO (0)")
    # the epochs that already have partitions get theirs for the new tables too
    op.execute("SELECT part.ensure_epochs(array(SELECT DISTINCT epoch_index FROM rec.escrow_epoch), 0)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS replay.escrow_verification")
    op.execute("DROP TABLE IF EXISTS rec.settlement")
    op.execute("DROP TABLE IF EXISTS rec.signed_diff")
    for column in ("auto_seal_every_n_nonces", "inference_seal_grace_seconds", "inference_seal_grace_nonces",
                   "fee_per_nonce", "create_devshard_fee", "token_price", "amount"):
        op.execute(f"ALTER TABLE rec.escrow DROP COLUMN IF EXISTS {column}")
    op.execute("ALTER TABLE rec.escrow DROP COLUMN IF EXISTS creator")

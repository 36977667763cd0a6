"""verification memo: the signature recoveries a verification kept, and the evidence prefix they were made for

An open escrow's log grows every poll cycle and the verification stage checks it again each time. These columns of
replay.escrow_verification let it skip the recoveries it already made (indexer.replay.verify_memo): a sha256 hash
chain over the first prefix_nonces stored diffs (content, user signature, signed root, in nonce order) and the
recoveries made for them, each keyed by a tag of the exact (message, signature) pair. When the stored diffs hash to
the same chain again, those recoveries are reused and only the state machine and the roots run over the prefix;
any changed byte gives another chain and every signature is recovered again. Internal: no api view shows them.

Revision ID: 0042_verification_memo
Revises: 0041_verifier_identity
Create Date: 2026-12-05
"""
from alembic import op

revision = "0042_verification_memo"
down_revision = "0041_verifier_identity"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE replay.escrow_verification
  ADD COLUMN prefix_nonces integer NOT NULL DEFAULT 0,
  ADD COLUMN prefix_chain bytea,
  ADD COLUMN prefix_signers text[],
  ADD COLUMN prefix_recoveries bytea;
COMMENT ON COLUMN replay.escrow_verification.prefix_nonces IS
  'how many stored diffs (in nonce order) passed every check made on them at the last verification; 0 = none';
COMMENT ON COLUMN replay.escrow_verification.prefix_chain IS
  'sha256 chain over those diffs (nonce, content, user_sig, post_state_root) seeded with the escrow and verifier '
  'version (indexer.replay.verify_memo.chain_links): the recoveries below are reused only when it matches';
COMMENT ON COLUMN replay.escrow_verification.prefix_signers IS
  'the distinct addresses the kept recoveries gave';
COMMENT ON COLUMN replay.escrow_verification.prefix_recoveries IS
  '18-byte entries: a 16-byte tag of the (message, signature) pair recovered, then the 2-byte big-endian index '
  'of its address in prefix_signers';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE replay.escrow_verification DROP COLUMN IF EXISTS prefix_recoveries, "
               "DROP COLUMN IF EXISTS prefix_signers, DROP COLUMN IF EXISTS prefix_chain, "
               "DROP COLUMN IF EXISTS prefix_nonces")

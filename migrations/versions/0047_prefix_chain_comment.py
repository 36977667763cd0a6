"""prefix_chain's comment names every field the chain hashes (indexer.replay.verify_memo.chain_links): the host's
state_hash too, which stands in for a signed root a host did not serve

Revision ID: 0047_prefix_chain_comment
Revises: 0046_warm_key_read_failures
Create Date: 2026-12-05
"""
from alembic import op

revision = "0047_prefix_chain_comment"
down_revision = "0046_warm_key_read_failures"
branch_labels = None
depends_on = None

_COMMENT = ("COMMENT ON COLUMN replay.escrow_verification.prefix_chain IS "
            "'sha256 chain over those diffs ({fields}) seeded with the escrow and verifier version "
            "(indexer.replay.verify_memo.chain_links): the recoveries below are reused only when it matches'")


def upgrade() -> None:
    op.execute(_COMMENT.format(fields="nonce, content, user_sig, post_state_root, state_hash"))


def downgrade() -> None:
    op.execute(_COMMENT.format(fields="nonce, content, user_sig, post_state_root"))

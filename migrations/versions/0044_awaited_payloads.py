"""awaited payloads: 0/0 Finishes stored without their response payload, asked again in later cycles

A refusal's kind (api.context_refusals.refusal_kind) is read from its stored response payload. A Finish whose
payload no member of the escrow's group served when its diff was fetched is stored without it and gets a row here,
in the same transaction; each poll cycle asks a bounded batch of the due rows again (indexer.poller.awaited), also
for escrows whose log is final, with a growing backoff between attempts. A payload obtained is loaded as the
Finish with its response_payload (the record is amended and its escrow replayed) and its row goes; after the last
allowed attempt the row stays, given up, with its last error (api.awaited_payloads, and a net.failure row).

Revision ID: 0044_awaited_payloads
Revises: 0042_verification_memo
Create Date: 2026-12-05
"""
from alembic import op

revision = "0044_awaited_payloads"
down_revision = "0042_verification_memo"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE net.awaited_payload (
    escrow_id text NOT NULL,
    inference_id bigint NOT NULL,
    epoch_index bigint NOT NULL,
    protocol_version text NOT NULL,
    record text NOT NULL,
    attempts integer NOT NULL DEFAULT 1 CHECK (attempts >= 1),
    first_missed_at timestamptz NOT NULL DEFAULT now(),
    last_attempt_at timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL,
    last_error text,
    given_up_at timestamptz,
    claimed_by text,
    claimed_until timestamptz,
    CONSTRAINT pk_awaited_payload PRIMARY KEY (escrow_id, inference_id)
);
CREATE INDEX ix_awaited_payload_due ON net.awaited_payload (next_attempt_at) WHERE given_up_at IS NULL;
COMMENT ON TABLE net.awaited_payload IS
  '0/0 Finishes stored without their response payload, asked again each cycle (indexer.poller.awaited)';
COMMENT ON COLUMN net.awaited_payload.record IS
  'the Finish record (NDJSON line) as stored without its payload: loaded again with response_payload once served';
COMMENT ON COLUMN net.awaited_payload.attempts IS 'cycles that asked the group for it (the escrow fetch counts as 1)';
COMMENT ON COLUMN net.awaited_payload.given_up_at IS 'set after the last allowed attempt: never asked again';
COMMENT ON COLUMN net.awaited_payload.claimed_by IS
  'the poller (lease holder id) asking for it now, until claimed_until: no other poller asks meanwhile';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS net.awaited_payload")

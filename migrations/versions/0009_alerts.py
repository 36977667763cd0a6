"""alerts: state per alert key, silences, the notification outbox and every delivery attempt

Revision ID: 0009_alerts
Revises: 0007_epoch_snapshots
Create Date: 2026-12-02
"""
from alembic import op

revision = "0009_alerts"
down_revision = "0007_epoch_snapshots"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE SCHEMA IF NOT EXISTS alert;
CREATE TABLE alert.state (
    alert_key text PRIMARY KEY,
    rule text NOT NULL,
    severity text NOT NULL,
    status text NOT NULL,
    participant text,
    epoch_index bigint,
    summary text NOT NULL,
    details jsonb NOT NULL DEFAULT '{}'::jsonb,
    first_fired_at timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    last_evaluated_at timestamptz NOT NULL,
    absent_evaluations integer NOT NULL DEFAULT 0,
    resolved_at timestamptz,
    last_notified_at timestamptz,
    notified_status text,
    notified_summary text,
    CONSTRAINT ck_alert_state_status CHECK (status IN ('firing', 'resolved')),
    CONSTRAINT ck_alert_state_severity CHECK (severity IN ('info', 'warning', 'critical'))
);
COMMENT ON TABLE alert.state IS 'one row per alert key ever raised: firing, or resolved after absent_evaluations '
    'consecutive evaluations without it. notified_status/notified_summary: what the receivers were last told, so a '
    'change they have not heard of (new, changed, resolved, or unsilenced) is notified; last_notified_at drives the '
    're-notify cooldown';
CREATE INDEX ix_alert_state_rule ON alert.state (rule, status);

CREATE TABLE alert.silence (
    silence_id bigserial PRIMARY KEY,
    alert_key text,
    rule text,
    ends_at timestamptz NOT NULL,
    reason text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_alert_silence_target CHECK ((alert_key IS NULL) <> (rule IS NULL))
);
COMMENT ON TABLE alert.silence IS 'no notifications for one alert key or a whole rule until ends_at; state is still '
    'kept, so an alert still firing when the silence ends is notified at the next evaluation';

CREATE TABLE alert.notification (
    notification_id bigserial PRIMARY KEY,
    alert_key text NOT NULL REFERENCES alert.state (alert_key),
    status text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_alert_notification_status CHECK (status IN ('firing', 'resolved'))
);
COMMENT ON TABLE alert.notification IS 'the outbox: one row per notification, written in the same transaction as the '
    'state change that caused it';

CREATE TABLE alert.delivery (
    delivery_id bigserial PRIMARY KEY,
    notification_id bigint NOT NULL REFERENCES alert.notification (notification_id),
    channel text NOT NULL,
    idempotency_key text NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error text,
    delivered_at timestamptz,
    CONSTRAINT uq_alert_delivery_key UNIQUE (idempotency_key),
    CONSTRAINT uq_alert_delivery_channel UNIQUE (notification_id, channel),
    CONSTRAINT ck_alert_delivery_status CHECK (status IN ('pending', 'delivered', 'failed'))
);
COMMENT ON TABLE alert.delivery IS 'one notification to one channel; idempotency_key is sent on every attempt. An '
    'attempt is leased by moving next_attempt_at forward before sending, so a crash after sending repeats the same key';
CREATE INDEX ix_alert_delivery_due ON alert.delivery (next_attempt_at) WHERE status = 'pending';

CREATE TABLE alert.delivery_attempt (
    delivery_id bigint NOT NULL REFERENCES alert.delivery (delivery_id),
    attempt integer NOT NULL,
    started_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now(),
    http_status integer,
    error text,
    CONSTRAINT pk_alert_delivery_attempt PRIMARY KEY (delivery_id, attempt)
);
COMMENT ON TABLE alert.delivery_attempt IS 'every recorded delivery attempt with the receiver''s answer';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP SCHEMA IF EXISTS alert CASCADE")

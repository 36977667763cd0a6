"""The settings and the alert channels built from them never show a credential in their repr: a log line, an
error or a traceback that prints them stays free of passwords, webhook paths and bot tokens."""
from __future__ import annotations

from indexer.alerts.channels import build_channels
from indexer.settings import Settings

SECRETS = ("db-pass-1", "slack-path-2", "hook-token-3", "bot-token-4", "node-pass-5", "rpc-pass-6")


def test_no_credential_in_the_repr_of_the_settings_or_the_channels():
    s = Settings.from_env({
        "DATABASE_URL": "postgresql://indexer:db-pass-1@db.internal/indexer",
        "INDEXER_ALERT_SLACK_WEBHOOKS": "https://hooks.slack.com/services/T0/B0/slack-path-2",
        "INDEXER_ALERT_WEBHOOKS": "https://hooks.example.org/a?token=hook-token-3",
        "INDEXER_ALERT_TELEGRAM_TOKEN": "123:bot-token-4", "INDEXER_ALERT_TELEGRAM_CHATS": "-100",
        "GONKA_CHAIN_REST_URL": "https://u:node-pass-5@node.example/", "GONKA_RPC_URL": "https://u:rpc-pass-6@rpc/"})
    channels = build_channels(s.alert_webhooks, s.alert_slack_webhooks, s.alert_telegram_token,
                              s.alert_telegram_chats)
    shown = repr(s) + str(s) + repr(channels) + repr(list(channels.values()))
    assert not [secret for secret in SECRETS if secret in shown], shown
    assert s.database_url.endswith("db-pass-1@db.internal/indexer")  # still there to be used
    assert "slack#" in shown and "telegram:-100#" in shown

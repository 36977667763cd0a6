"""The settings and the alert channels built from them never show a credential in their repr: a log line, an
error or a traceback that prints them stays free of passwords, webhook paths and bot tokens."""
from __future__ import annotations

import pytest

from indexer.alerts.channels import build_channels
from indexer.settings import ConfigError, Settings

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


@pytest.mark.parametrize("variable, value, reason", [
    ("INDEXER_ALERT_WEBHOOKS", "https://ok.example/a,http://u:pw-s3cret@[::1/hook", "unmatched brackets"),
    ("INDEXER_ALERT_WEBHOOKS", "http://hooks.example:abc/x?token=s3cret", "port"),
    ("INDEXER_ALERT_SLACK_WEBHOOKS", "https://hooks.slack.com:99999/services/T/B/s3cret", "port"),
    ("INDEXER_ALERT_SLACK_WEBHOOKS", "https://[zz]/services/T/B/s3cret", "bad IPv6"),
    ("INDEXER_ALERT_SLACK_WEBHOOKS", "https://hooks.slack.com/services/T/B/s3cret\x01", "refuses"),
    ("INDEXER_ALERT_TELEGRAM_API", "https://u:s3cret@" + "a" * 64 + ".example", "cannot be encoded"),
    ("INDEXER_ALERT_TELEGRAM_API", "ftp://u:s3cret@tg.example", "not an http(s) URL"),
])
def test_a_channel_url_the_http_client_cannot_send_to_is_refused_naming_the_variable(variable, value, reason):
    """Found at send time it failed every delivery of that channel; the message never shows the URL's credential."""
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({variable: value})
    message = str(caught.value)
    assert message.startswith(variable) and reason in message and "s3cret" not in message, message
    assert ("(item 2)" in message) == ("," in value)


def test_channels_given_on_the_command_line_are_checked_alike():
    with pytest.raises(ValueError, match=r"^alert webhook \(--webhook, INDEXER_ALERT_WEBHOOKS\) .*port") as caught:
        build_channels(["http://hooks.example:abc/x?token=s3cret"])
    assert "s3cret" not in str(caught.value)
    with pytest.raises(ValueError, match="INDEXER_ALERT_TELEGRAM_TOKEN is not a bot token") as caught:
        build_channels(telegram_token="123:s3cret/../x?y", telegram_chats=["1"])
    assert "s3cret" not in str(caught.value)

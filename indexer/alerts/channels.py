"""Where notifications go: the generic webhook of interface.md §4, Slack incoming webhooks, Telegram bots.

Every channel is sent the same ``Idempotency-Key`` header on every attempt of one notification (Slack and Telegram
ignore it; a receiver behind a proxy that dedupes can use it). A channel's *name* is what the outbox and
``api.alert_deliveries`` record: it never contains the URL's userinfo, path, query or a token (a Slack webhook URL
and a Telegram bot token are credentials), only the host and a short digest that tells two URLs apart. What a
receiver answers is scrubbed of the same credentials, and of a URL's ``user:password@``, before it is stored or
logged.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote, unquote, urlsplit

import httpx
import orjson

from indexer.alerts.messages import slack_message, telegram_message, webhook_body
from indexer.alerts.posting import Answer, post
from indexer.settings import check_http_url


class Channel(Protocol):
    name: str

    def send(self, client: httpx.Client, body: dict, idempotency_key: str, deadline: float) -> Answer: ...

    def scrub(self, text: str) -> str: ...


_TOKEN = re.compile(r"[A-Za-z0-9:_-]+")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:8]


def _secrets(url: str) -> list[str]:
    """The parts of a URL a receiver (or a proxy before it) may echo back without the rest: the whole URL, its path
    with the query, the path and the query (a Slack webhook's path and a ``?token=`` query are credentials), each as
    written, percent-decoded and percent-encoded, longest first. Parts shorter than 8 characters ("/", "/hook") are
    no secret and would mangle unrelated text."""
    parts = urlsplit(url)
    pieces = {url, parts.path + ("?" + parts.query if parts.query else ""), parts.path, parts.query}
    pieces |= {unquote(p) for p in pieces} | {quote(p, safe="/:?=&") for p in pieces}
    return sorted((p for p in pieces if len(p) >= 8), key=len, reverse=True)


def _userinfo(url: str) -> list[str]:
    """The credentials in a URL's userinfo (``https://user:pass@host``), as a receiver or a proxy may echo them: the
    userinfo, its user and its password, each as written and percent-decoded, and the Basic authorization httpx
    sends for them (base64 of user:password), longest first. Parts shorter than 4 characters are not searched for
    (as database passwords: replacing them would garble every message)."""
    userinfo = urlsplit(url).netloc.rpartition("@")[0]
    if not userinfo:
        return []
    user, _, password = userinfo.partition(":")
    pieces = {userinfo, user, password}
    pieces |= {unquote(p) for p in pieces}
    pieces.add(base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode())
    return sorted((p for p in pieces if len(p) >= 4), key=len, reverse=True)


def _scrub(text: str, secrets: list[str], shown: str) -> str:
    for secret in secrets:
        text = text.replace(secret, shown)
    return text


def check_url(url: str, what: str) -> str:
    """The URL when the HTTP client can send to it (:func:`indexer.settings.check_http_url`), else ValueError."""
    return check_http_url(url, what)


def _json(body: dict) -> bytes:
    """The body as JSON: orjson, or the standard library's encoder when a number is past 64 bits (a rule's numeric
    sum in ``details``), which orjson refuses: such a notification is sent with its number as it is instead of
    failing every attempt and ending the delivery pass."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _headers(idempotency_key: str) -> dict:
    return {"Content-Type": "application/json", "Idempotency-Key": idempotency_key}


@dataclass
class Webhook:
    url: str = field(repr=False)  # may carry a token (?token=…): the repr shows the name only
    name: str = field(init=False)

    def __post_init__(self) -> None:
        check_url(self.url, "alert webhook (--webhook, INDEXER_ALERT_WEBHOOKS)")
        self.name = f"webhook:{urlsplit(self.url).hostname}#{_digest(self.url)}"

    def send(self, client: httpx.Client, body: dict, idempotency_key: str, deadline: float) -> Answer:
        return post(client, self.url, _json(webhook_body(body)), _headers(idempotency_key), deadline)

    def scrub(self, text: str) -> str:
        return _scrub(_scrub(text, _secrets(self.url), self.name), _userinfo(self.url), "***")


@dataclass
class Slack:
    url: str = field(repr=False)  # an incoming-webhook URL: the path is the credential
    name: str = field(init=False)

    def __post_init__(self) -> None:
        check_url(self.url, "Slack webhook (--slack-webhook, INDEXER_ALERT_SLACK_WEBHOOKS)")
        self.name = f"slack#{_digest(self.url)}"

    def send(self, client: httpx.Client, body: dict, idempotency_key: str, deadline: float) -> Answer:
        return post(client, self.url, orjson.dumps(slack_message(body)), _headers(idempotency_key), deadline)

    def scrub(self, text: str) -> str:
        return _scrub(_scrub(text, _secrets(self.url), self.name), _userinfo(self.url), "***")


@dataclass
class Telegram:
    token: str = field(repr=False)
    chat_id: str
    api_url: str = "https://api.telegram.org"
    name: str = field(init=False)

    def __post_init__(self) -> None:
        check_url(self.api_url, "Telegram API URL (INDEXER_ALERT_TELEGRAM_API)")
        if not _TOKEN.fullmatch(self.token or ""):  # the token is a path segment of every request's URL
            raise ValueError("INDEXER_ALERT_TELEGRAM_TOKEN is not a bot token (only letters, digits, ':', '_' and "
                             "'-'; the value is not shown)")
        self.api_url = self.api_url.rstrip("/")
        self.name = f"telegram:{self.chat_id}#{_digest(self.token)}"

    def send(self, client: httpx.Client, body: dict, idempotency_key: str, deadline: float) -> Answer:
        return post(client, f"{self.api_url}/bot{self.token}/sendMessage",
                    orjson.dumps(telegram_message(self.chat_id, body)), _headers(idempotency_key), deadline)

    def scrub(self, text: str) -> str:
        text = _scrub(text, sorted({self.token, unquote(self.token), quote(self.token, safe="")}, key=len,
                                   reverse=True), "<token>")
        return _scrub(text, _userinfo(self.api_url), "***")  # a proxy's https://user:pass@ in the API URL


def build_channels(webhooks=(), slack=(), telegram_token: str | None = None, telegram_chats=(),
                   telegram_api: str | None = None) -> dict[str, Channel]:
    """Channels by name, in a stable order; a Telegram token without chat ids (or the reverse) is an error."""
    channels: list[Channel] = [Webhook(u) for u in webhooks] + [Slack(u) for u in slack]
    if bool(telegram_token) != bool(telegram_chats):
        raise ValueError("Telegram alerts need both INDEXER_ALERT_TELEGRAM_TOKEN and INDEXER_ALERT_TELEGRAM_CHATS")
    for chat in telegram_chats:
        channels.append(Telegram(telegram_token, chat, telegram_api or "https://api.telegram.org"))
    return {c.name: c for c in channels}

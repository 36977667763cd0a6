"""Every environment variable the indexer reads, in one place, with its default and meaning.

Modules never read the environment themselves: the CLI builds one :class:`Settings` (environment, then command-line
options on top) and passes what each stage needs. README.md "Configuration" lists :data:`VARIABLES`; a test keeps the
two in step.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, MutableMapping

# name -> (default shown to users, meaning)
VARIABLES: dict[str, tuple[str, str]] = {
    "DATABASE_URL": ("(unset: embedded PostgreSQL)",
                     "PostgreSQL URL (postgresql://, postgres:// or postgresql+psycopg://); --database-url wins"),
    "INDEXER_HOME": ("./.indexer", "directory of the embedded PostgreSQL (data, port, password file, log)"),
    "GONKA_CHAIN_REST_URL": ("(none)", "chain REST base URL(s), comma-separated, tried in order (failover)"),
    "GONKA_RPC_URL": ("(none)", "CometBFT RPC base URL(s), comma-separated, tried in order"),
    "GONKA_VALIDATOR_ADDRESS": ("gonka1indexer",
                                "address the poller names in X-Validator-Address when it asks a host for payloads"),
    "GONKA_OPERATOR_ADDRESS": ("(unset)", "operator mode: the host operator's address that signs payload requests"),
    "GONKA_OPERATOR_KEY_FILE": ("(unset)", "operator mode: file holding that address's key (owner-only; never logged)"),
    "GONKA_OPERATOR_MEMBER": ("(unset)", "operator mode: the group member a warm-key operator address acts for"),
    "INDEXER_ALERT_WEBHOOKS": ("(none)", "alert webhook URLs, comma-separated (--webhook adds more)"),
    "INDEXER_ALERT_SLACK_WEBHOOKS": ("(none)", "Slack incoming-webhook URLs for alerts, comma-separated (credentials: "
                                               "never logged)"),
    "INDEXER_ALERT_TELEGRAM_TOKEN": ("(unset)", "Telegram bot token for alerts (a credential: never logged)"),
    "INDEXER_ALERT_TELEGRAM_CHATS": ("(none)", "Telegram chat ids the bot posts alerts to, comma-separated"),
    "INDEXER_ALERT_TELEGRAM_API": ("https://api.telegram.org", "Telegram Bot API base URL"),
    "INDEXER_METRICS_ADDR": ("127.0.0.1:9464", "indexer run: HOST:PORT serving /metrics, /health, /ready (off: none)"),
    "INDEXER_READY_MAX_LAG": ("900", "indexer run: seconds of source lag above which /ready answers 503"),
    "INDEXER_LEASE_SECONDS": ("60", "indexer run: seconds a poller's work lease lasts unrenewed (several pollers "
                                    "on one database: a killed poller's work is taken over after this)"),
    "INDEXER_IMPL": ("auto", "typing of loaded lines: auto (the C block typer when built), c (require it), "
                             "python (the Python paths alone)"),
}


def typing_impl() -> str:
    """The ``INDEXER_IMPL`` value (its :data:`VARIABLES` default when unset).

    Read where it is used rather than through :class:`Settings`: the load's typing is chosen when
    indexer.load.typed.native is imported, in the CLI's process and in every worker process alike (as psycopg reads
    PSYCOPG_IMPL)."""
    return os.environ.get("INDEXER_IMPL", VARIABLES["INDEXER_IMPL"][0])


def drop_libpq_variables(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove libpq's variables (PGHOST, PGSSLMODE, PGOPTIONS, PGHOSTADDR, PGSERVICE, …: every ``PG…`` name) from
    the environment, and return the names removed.

    Called once a process talks to the embedded server, which is the indexer's own: a user's variables are meant
    for their other servers, and libpq would otherwise apply every one the URL does not name (PGHOSTADDR sends the
    connection to another address, PGSSLMODE=require or PGOPTIONS read-only stop it). Removed from the process
    environment, they reach neither libpq here nor the worker processes and server binaries started after."""
    env = os.environ if environ is None else environ
    names = sorted(name for name in env if name.startswith("PG"))
    for name in names:
        del env[name]
    return names


DEFAULT_VALIDATOR = "gonka1indexer"
_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://", "postgresql+psycopg2://")


class ConfigError(ValueError):
    """A setting that cannot work; the CLI reports it with exit 2."""


def split_urls(value: str | None) -> tuple[str, ...]:
    """Comma-separated URLs, trimmed, without trailing slashes; empty items dropped."""
    return tuple(u.strip().rstrip("/") for u in (value or "").split(",") if u.strip())


def check_http_url(url: str, origin: str) -> str:
    """``url`` when it is an http(s) URL the HTTP client can send to, else a :class:`ConfigError` naming ``origin``.
    Found at send time, such a URL failed every delivery of its channel. The message shows the scheme and host at
    most: the rest (userinfo, a webhook's path, a ?token= query) may be a credential."""
    from urllib.parse import urlsplit

    import httpx

    try:
        parts = urlsplit(url)
    except ValueError:  # an IPv6 host without its "]", or no IP address between the brackets
        raise ConfigError(f"{origin} is not a usable URL: its host is invalid (unmatched brackets, a bad IPv6 "
                          "address; the URL is not shown: it may hold a credential)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{origin} is not an http(s) URL: {parts.scheme or '?'}://{parts.hostname or '?'}/…")
    shown = f"{parts.scheme}://{parts.hostname}/…"
    try:
        parts.port
    except ValueError:
        raise ConfigError(f"{origin} is not a usable URL: {shown} has a port that is no number from 0 to 65535") \
            from None
    try:
        httpx.URL(url)
    except httpx.InvalidURL:
        raise ConfigError(f"{origin} is not a usable URL: {shown} has a host or character the HTTP client refuses "
                          "(a space, a control character, an invalid IPv6 address)") from None
    try:
        parts.hostname.encode("idna")
    except UnicodeError:
        raise ConfigError(f"{origin} is not a usable URL: its host name cannot be encoded (a label over 63 "
                          "characters, an empty label)") from None
    return url


def _http_urls(value: str | None, name: str) -> tuple[str, ...]:
    urls = split_urls(value)
    for i, url in enumerate(urls, 1):
        check_http_url(url, name if len(urls) == 1 else f"{name} (item {i})")
    return urls


def check_database_url(url: str, origin: str) -> str:
    if not url.strip():
        raise ConfigError(f"{origin} is set but empty: give a postgresql:// URL, or unset it to use the embedded "
                          "PostgreSQL")
    if not url.startswith(_SCHEMES):
        # only the scheme is shown, bounded: a libpq "key=value" string has no scheme and may hold password=
        scheme = repr(url.split("://", 1)[0][:20]) if "://" in url else "none"
        raise ConfigError(f"{origin} is not a PostgreSQL URL (scheme {scheme}); expected postgresql://…")
    authority = url.split("://", 1)[1].split("/", 1)[0]
    if authority.count("@") > 1:
        # libpq splits at the first "@" and names the rest of the password as the host in its error
        raise ConfigError(f"{origin}: the user or password holds an unencoded '@' (write it as %40)")
    _check_libpq_parses(url, origin)
    return url


def _check_libpq_parses(url: str, origin: str) -> None:
    """Refuse a URL libpq cannot parse (an IPv6 host without its "]", a bad %-escape, a query parameter without
    "="), as a configuration error naming ``origin``: found at connect time it was a runtime failure. libpq's reason
    is kept without the quoted part of the URL it ends with, which may be the password."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict("postgresql://" + url.split("://", 1)[1])  # the dialect prefixes are libpq's too
    except ProgrammingError as exc:
        reason = (str(exc).strip().splitlines() or ["?"])[0].split(': "', 1)[0]
        raise ConfigError(f"{origin} cannot be parsed as a PostgreSQL URL: {reason[:200]}") from None
    # libpq parses any port and refuses it only when connecting; one host's port each, comma-separated. The value is
    # not shown: in postgresql://user:password/db (the "@" forgotten) the password is the "port".
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(f"{origin} cannot be parsed as a PostgreSQL URL: a port is not a number from 1 to "
                              "65535 (the value is not shown)")


# Fields that may hold a credential (a password, userinfo, a webhook path, a bot token) are left out of the repr, so
# printing or logging the settings (or a traceback that shows them) never shows one.


@dataclass(frozen=True)
class Settings:
    database_url: str | None = field(default=None, repr=False)
    indexer_home: Path = Path("./.indexer")
    chain_rest_urls: tuple[str, ...] = field(default=(), repr=False)
    rpc_urls: tuple[str, ...] = field(default=(), repr=False)
    validator_address: str = DEFAULT_VALIDATOR
    operator_address: str | None = None
    operator_key_file: Path | None = None
    operator_member: str | None = None
    alert_webhooks: tuple[str, ...] = field(default=(), repr=False)
    alert_slack_webhooks: tuple[str, ...] = field(default=(), repr=False)
    alert_telegram_token: str | None = field(default=None, repr=False)
    alert_telegram_chats: tuple[str, ...] = ()
    alert_telegram_api: str = "https://api.telegram.org"
    metrics_addr: str = "127.0.0.1:9464"
    ready_max_lag: float = 900.0
    lease_seconds: float = 60.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if environ is None else environ
        db = env.get("DATABASE_URL")
        key_file = env.get("GONKA_OPERATOR_KEY_FILE")
        return cls(
            database_url=None if db is None else check_database_url(db, "DATABASE_URL"),
            indexer_home=Path(env.get("INDEXER_HOME") or "./.indexer").expanduser(),
            chain_rest_urls=split_urls(env.get("GONKA_CHAIN_REST_URL")),
            rpc_urls=split_urls(env.get("GONKA_RPC_URL")),
            validator_address=env.get("GONKA_VALIDATOR_ADDRESS") or DEFAULT_VALIDATOR,
            operator_address=env.get("GONKA_OPERATOR_ADDRESS") or None,
            operator_key_file=Path(key_file).expanduser() if key_file else None,
            operator_member=env.get("GONKA_OPERATOR_MEMBER") or None,
            alert_webhooks=_http_urls(env.get("INDEXER_ALERT_WEBHOOKS"), "INDEXER_ALERT_WEBHOOKS"),
            alert_slack_webhooks=_http_urls(env.get("INDEXER_ALERT_SLACK_WEBHOOKS"), "INDEXER_ALERT_SLACK_WEBHOOKS"),
            alert_telegram_token=env.get("INDEXER_ALERT_TELEGRAM_TOKEN") or None,
            alert_telegram_chats=tuple(c.strip() for c in (env.get("INDEXER_ALERT_TELEGRAM_CHATS") or "").split(",")
                                       if c.strip()),
            alert_telegram_api=check_http_url(env.get("INDEXER_ALERT_TELEGRAM_API") or "https://api.telegram.org",
                                          "INDEXER_ALERT_TELEGRAM_API"),
            metrics_addr=env.get("INDEXER_METRICS_ADDR") or "127.0.0.1:9464",
            ready_max_lag=_seconds(env.get("INDEXER_READY_MAX_LAG"), 900.0, "INDEXER_READY_MAX_LAG"),
            lease_seconds=_seconds(env.get("INDEXER_LEASE_SECONDS"), 60.0, "INDEXER_LEASE_SECONDS"),
        )


def _seconds(value: str | None, default: float, name: str) -> float:
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"{name} wants a number of seconds, got {value!r}") from None
    if not seconds > 0:
        raise ConfigError(f"{name} must be greater than 0, got {value!r}")
    return seconds

"""Command bodies for `indexer alerts` and the observability side of `indexer run` (metrics server, alert jobs)."""
from __future__ import annotations

import argparse
import time

from indexer.cli.output import EXIT_OK, say
from indexer.interval_jobs import run_jobs
from indexer.settings import ConfigError, Settings, split_urls


def channels_from(args: argparse.Namespace, settings: Settings):
    from indexer.alerts.channels import build_channels

    webhooks = settings.alert_webhooks + tuple(u for w in args.webhook for u in split_urls(w))
    slack = settings.alert_slack_webhooks + tuple(u for w in args.slack_webhook for u in split_urls(w))
    chats = settings.alert_telegram_chats + tuple(args.telegram_chat)
    try:
        return build_channels(webhooks, slack, settings.alert_telegram_token, chats, settings.alert_telegram_api)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def alert_job(url: str, args: argparse.Namespace, settings: Settings, **kw):
    from pathlib import Path

    from indexer.alerts.engine import Policy
    from indexer.alerts.job import AlertJob
    from indexer.alerts.rules import RuleError

    try:
        return AlertJob(url, channels_from(args, settings),
                        policy=Policy(resolve_after=args.resolve_after, cooldown=args.cooldown),
                        rules_dirs=[Path(d) for d in args.rules_dir], **kw)
    except RuleError as exc:
        raise ConfigError(str(exc)) from None


def cmd_alerts(args, settings: Settings, url: str) -> int:
    import psycopg

    from indexer.alerts.engine import silence
    from indexer.alerts.job import format_delivery, format_evaluation

    if args.silence:
        with psycopg.connect(url) as conn:
            kind, ends = silence(conn, args.silence, args.silence_for, args.reason)
        say(f"silenced {kind.replace('_', ' ')} {args.silence} until {ends.isoformat(timespec='seconds')}")
        return EXIT_OK
    job = alert_job(url, args, settings, on_evaluation=lambda s: say(format_evaluation(s)))
    if not job.channels:
        say("no alert channel configured (--webhook, --slack-webhook, --telegram-chat): notifications stay in "
            "the outbox (api.alerts)")
    if args.once:
        job.evaluate()
        say(format_delivery(job.deliver()))
        return EXIT_OK
    run_jobs(job.scheduled(args.alerts_interval))
    return EXIT_OK


def metrics_server(args, settings: Settings, url: str):
    """The started /metrics server for `indexer run`, or None when the address is off."""
    from indexer.observe.server import MetricsServer, parse_addr

    addr = parse_addr(args.metrics_addr or settings.metrics_addr)
    if addr is None:
        return None
    server = MetricsServer(addr, url, args.ready_max_lag or settings.ready_max_lag).start()
    say(f"metrics on http://{server.address}/metrics (/health, /ready)")
    return server


def timed(fn, metrics):
    """Run one poll cycle, observing its duration and outcome when metrics are served."""
    start = time.perf_counter()
    try:
        result = fn()
    except Exception:
        if metrics:
            metrics.observe_cycle(time.perf_counter() - start, "error")
        raise
    if metrics:
        metrics.observe_cycle(time.perf_counter() - start)
    return result

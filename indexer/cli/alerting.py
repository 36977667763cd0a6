"""Command bodies for `indexer alerts` and the observability side of `indexer run` (metrics server, alert jobs)."""
from __future__ import annotations

import argparse
import sys
import time

from indexer.cli.output import EXIT_OK, say
from indexer.scheduling import run_jobs
from indexer.settings import ConfigError, Settings, split_urls


NO_CHANNEL = ("no alert channel configured here (--webhook, --slack-webhook, --telegram-chat): notifications are "
              "kept in the outbox (api.alerts) and delivered by any `indexer alerts` or `indexer run` that has "
              "channels: what is still firing then, and the resolutions of what it was sent")


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
    from indexer.alerts.job import format_delivery, format_evaluation

    if args.silence or args.silences or args.unsilence:
        return _silences(args, url)
    job = alert_job(url, args, settings, on_evaluation=lambda s: say(format_evaluation(s)))
    if not job.channels:
        say(NO_CHANNEL)
    if args.once:
        job.evaluate()
        say(format_delivery(job.deliver()))
        return EXIT_OK
    run_jobs(job.scheduled(args.alerts_interval))
    return EXIT_OK


def _silences(args, url: str) -> int:
    """--silence, --silences, --unsilence: change or list silences, then exit."""
    from pathlib import Path

    import psycopg

    from indexer.alerts.engine import check_target, live_silences, silence, unsilence
    from indexer.alerts.messages import plain
    from indexer.alerts.rules import RuleError, load_rules

    with psycopg.connect(url) as conn:
        if args.silence:
            try:
                check_target(args.silence, [r.name for r in load_rules([Path(d) for d in args.rules_dir])])
            except (RuleError, ValueError) as exc:
                raise ConfigError(str(exc)) from None
            kind, ends = silence(conn, args.silence, args.silence_for, args.reason)
            say(f"silenced {kind.replace('_', ' ')} {args.silence} until {ends.isoformat(timespec='seconds')}")
        elif args.unsilence:
            lifted = unsilence(conn, args.unsilence)
            if not lifted:
                live = ", ".join(sorted({plain(t) for _, t, _, _ in live_silences(conn)})) or "none"
                raise ConfigError(f"no silence in force for {args.unsilence!r} (in force: {live})")
            say(f"lifted {lifted} silence(s) of {args.unsilence}")
        else:
            rows = live_silences(conn)
            for kind, target, ends, reason in rows:  # one tab-separated line each; the reason only when given
                fields = [kind, plain(target), f"until {ends.isoformat(timespec='seconds')}"]
                fields += [plain(reason)] if reason else []
                sys.stdout.write("\t".join(fields) + "\n")
            say(f"{len(rows)} silence(s) in force")
    return EXIT_OK


def metrics_server(args, settings: Settings, url: str):
    """The started /metrics server for `indexer run`, or None when the address is off."""
    from indexer.observe.server import MetricsServer, parse_addr

    addr = parse_addr(args.metrics_addr or settings.metrics_addr)
    if addr is None:
        return None
    from indexer.alerts.rules import RuleError, load_rules

    try:
        rules = [r.name for r in load_rules(getattr(args, "rules_dir", []))]  # each gets a firing series, 0 or more
    except RuleError as exc:
        raise ConfigError(str(exc)) from None
    server = MetricsServer(addr, url, args.ready_max_lag or settings.ready_max_lag, rules=rules).start()
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

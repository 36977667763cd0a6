"""``indexer run [--once]``: the poll cycle on an APScheduler 3 interval job (max_instances=1), SIGTERM-safe.

Two pollers on one database never double-ingest: each cycle takes a session-level advisory lock and a cycle that
cannot take it does nothing (see :func:`indexer.poller.cycle.poll_once`).
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Callable, Sequence

from indexer.poller.cycle import PollSummary, poll_once

log = logging.getLogger(__name__)


def endpoint_urls(value: str | Sequence[str] | None, env: str) -> list[str]:
    """Comma-separated URLs (option, else environment); several chain URLs fail over in order."""
    if value is None:
        value = os.environ.get(env, "")
    items = value.split(",") if isinstance(value, str) else list(value)
    return [u.strip().rstrip("/") for u in items if u and u.strip()]


def run_forever(url: str, chain_urls: list[str], rpc_urls: list[str], *, interval: float = 30.0,
                on_cycle: Callable[[PollSummary], None] | None = None, **kw) -> None:
    from apscheduler.schedulers.blocking import BlockingScheduler

    sched = BlockingScheduler()

    def job() -> None:
        try:
            summary = poll_once(url, chain_urls, rpc_urls, **kw)
        except Exception:  # noqa: BLE001 - the next cycle retries; the error is in net.cursor
            log.exception("poll cycle failed")
            return
        if on_cycle:
            on_cycle(summary)

    sched.add_job(job, "interval", seconds=interval, max_instances=1, coalesce=True, id="poll",
                  next_run_time=__import__("datetime").datetime.now())

    def stop(signum, frame) -> None:  # noqa: ARG001
        log.info("signal %s: finishing the running cycle, then stopping", signum)
        threading.Thread(target=sched.shutdown, kwargs={"wait": True}, daemon=True).start()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        sched.start()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def format_summary(s: PollSummary) -> str:
    if s.locked_out:
        return "poll: another poller holds the lock; cycle skipped"
    return (f"poll: epoch {s.epoch} (window {s.epochs[0] if s.epochs else '-'}..{s.epoch}), {s.escrows} escrow(s) "
            f"fetched, {s.escrows_skipped_final} final, {s.escrows_pruned} pruned, {s.escrows_failed} failed, "
            f"{s.escrows_stalled} stalled; epochs "
            f"{', '.join(f'{e} {st}' for e, st in sorted(s.epoch_states.items())) or '-'}; "
            f"{s.diffs} diffs, {s.txs} txs, {s.loaded} new / {s.amended} amended rows; {s.requests} requests; "
            f"replayed {s.replayed_escrows} escrow(s), rules on {s.rules_epochs} epoch(s); {s.seconds:.2f}s")


def cmd_run(args) -> int:
    from indexer.cli import EXIT_INPUT, EXIT_OK, console
    from indexer.commands import database_url, ensure_schema

    chain = endpoint_urls(getattr(args, "gonka_chain_rest_url", None), "GONKA_CHAIN_REST_URL")
    rpc = endpoint_urls(getattr(args, "gonka_rpc_url", None), "GONKA_RPC_URL")
    if not chain or not rpc:
        console.print("[red]error:[/] set GONKA_CHAIN_REST_URL and GONKA_RPC_URL "
                      "(or --gonka-chain-rest-url / --gonka-rpc-url)")
        return EXIT_INPUT
    url = database_url(args)
    ensure_schema(url)
    if args.once:
        console.print(format_summary(poll_once(url, chain, rpc)))
        return EXIT_OK
    run_forever(url, chain, rpc, interval=args.interval, on_cycle=lambda s: console.print(format_summary(s)))
    return EXIT_OK


def cmd_devnet(args) -> int:
    from indexer.cli import EXIT_INPUT, EXIT_OK, console
    from indexer.devnet.run import is_loopback, serve

    if not is_loopback(args.bind):
        console.print("[red]error:[/] the devnet only binds to loopback")
        return EXIT_INPUT
    serve(args, on_ready=lambda server: console.print(
        f"devnet serving; export GONKA_CHAIN_REST_URL={server.chain_rest_url} GONKA_RPC_URL={server.rpc_url}; "
        "Ctrl-C stops"))
    return EXIT_OK

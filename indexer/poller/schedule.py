"""``indexer run``: the poll cycle on an APScheduler 3 interval job (max_instances=1), SIGTERM-safe.

Several pollers on one database never double-ingest: they split each cycle's work through leases in the database
(see :mod:`indexer.poller.leases` and :func:`indexer.poller.cycle.poll_once`).
"""
from __future__ import annotations

import logging
from typing import Callable, Sequence

from indexer.poller.cycle import PollSummary, poll_once
from indexer.interval_jobs import Job, run_jobs

log = logging.getLogger(__name__)


def run_forever(url: str, chain_urls: Sequence[str], rpc_urls: Sequence[str], *, interval: float = 30.0,
                on_cycle: Callable[[PollSummary], None] | None = None,
                on_failure: Callable[[Exception], None] | None = None,
                jobs: Sequence[Job] = (), **kw) -> None:
    """Poll every ``interval`` seconds until SIGTERM/SIGINT; a failed cycle is logged and the next one retries.
    ``jobs``: more (callable, seconds, id) interval jobs on the same scheduler (freezing, alerts)."""

    def job() -> None:
        try:
            summary = poll_once(url, chain_urls, rpc_urls, **kw)
        except Exception as exc:  # noqa: BLE001 - the next cycle retries; the error is in net.cursor
            log.exception("poll cycle failed")
            if on_failure:
                on_failure(exc)
            return
        if on_cycle:
            on_cycle(summary)

    run_jobs([(job, interval, "poll"), *jobs])

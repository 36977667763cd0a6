"""``indexer run``: the poll cycle on an APScheduler 3 interval job (max_instances=1), SIGTERM-safe.

Two pollers on one database never double-ingest: each cycle takes a session-level advisory lock and a cycle that
cannot take it does nothing (see :func:`indexer.poller.cycle.poll_once`).
"""
from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime
from typing import Callable, Sequence

from indexer.poller.cycle import PollSummary, poll_once

log = logging.getLogger(__name__)


def run_forever(url: str, chain_urls: Sequence[str], rpc_urls: Sequence[str], *, interval: float = 30.0,
                on_cycle: Callable[[PollSummary], None] | None = None,
                on_failure: Callable[[Exception], None] | None = None,
                jobs: Sequence[tuple[Callable[[], None], float, str]] = (), **kw) -> None:
    """Poll every ``interval`` seconds until SIGTERM/SIGINT; a failed cycle is logged and the next one retries.
    ``jobs``: more (callable, seconds, id) interval jobs on the same scheduler (the alert jobs)."""
    from apscheduler.schedulers.blocking import BlockingScheduler

    sched = BlockingScheduler()

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

    sched.add_job(job, "interval", seconds=interval, max_instances=1, coalesce=True, id="poll",
                  next_run_time=datetime.now())
    for fn, seconds, job_id in jobs:
        sched.add_job(fn, "interval", seconds=seconds, max_instances=1, coalesce=True, id=job_id,
                      next_run_time=datetime.now())

    def stop(signum, frame) -> None:  # noqa: ARG001
        log.info("signal %s: finishing the running cycle, then stopping", signum)
        threading.Thread(target=sched.shutdown, kwargs={"wait": True}, daemon=True).start()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        sched.start()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

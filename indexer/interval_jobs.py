"""Interval jobs on one APScheduler 3 blocking scheduler, for the long-running commands (`indexer run`, `indexer
alerts`): each job runs at most once at a time (a slow run is not stacked), the first run is immediate, and SIGTERM
or SIGINT lets the running jobs finish before the scheduler stops."""
from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime
from typing import Callable, Sequence

log = logging.getLogger(__name__)

Job = tuple[Callable[[], None], float, str]  # (callable, seconds between runs, id)


def run_jobs(jobs: Sequence[Job]) -> None:
    """Run the interval jobs until SIGTERM/SIGINT."""
    from apscheduler.schedulers.blocking import BlockingScheduler

    sched = BlockingScheduler()
    for fn, seconds, job_id in jobs:
        sched.add_job(fn, "interval", seconds=seconds, max_instances=1, coalesce=True, id=job_id,
                      next_run_time=datetime.now())

    def stop(signum, frame) -> None:  # noqa: ARG001
        log.info("signal %s: finishing the running jobs, then stopping", signum)
        threading.Thread(target=sched.shutdown, kwargs={"wait": True}, daemon=True).start()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        sched.start()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

"""Interval jobs on one APScheduler 3 blocking scheduler, for the long-running commands (`indexer run`, `indexer
alerts`): each job runs at most once at a time (a slow run is not stacked), the first run is immediate, and SIGTERM
or SIGINT lets the running jobs finish before the scheduler stops.

A run that outlasts its interval is said once (a WARNING when it first overlaps a tick, an INFO line with the
skipped ticks when it ends), instead of APScheduler's "maximum number of running instances reached" at every
tick."""
from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime
from typing import Callable, Sequence

log = logging.getLogger(__name__)

Job = tuple[Callable[[], None], float, str]  # (callable, seconds between runs, id)


_SKIPPED = "maximum number of running instances reached"


class _QuietSkips(logging.Filter):
    """Drops APScheduler's per-tick skip warning (Overruns says it once per episode)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _SKIPPED not in record.getMessage()


class Overruns:
    """Listens to the scheduler's events: one message when a job's run first overlaps its next tick, one when that
    run ends (how many ticks it skipped)."""

    def __init__(self, intervals: dict[str, float]) -> None:
        self.intervals = intervals
        self.skipped: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, event) -> None:
        from apscheduler.events import EVENT_JOB_MAX_INSTANCES

        with self._lock:
            if event.code == EVENT_JOB_MAX_INSTANCES:
                first = event.job_id not in self.skipped
                self.skipped[event.job_id] = self.skipped.get(event.job_id, 0) + 1
                ended = None
            else:
                first, ended = False, self.skipped.pop(event.job_id, None)
        if first:
            log.warning("%s: a run is taking longer than its %g s interval; runs never overlap, the next one starts "
                        "at the first tick after it ends", event.job_id, self.intervals.get(event.job_id, 0))
        elif ended:
            log.info("%s: the run that outlasted its interval ended; %d tick(s) skipped", event.job_id, ended)


def run_jobs(jobs: Sequence[Job]) -> None:
    """Run the interval jobs until SIGTERM/SIGINT."""
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES
    from apscheduler.schedulers.blocking import BlockingScheduler

    sched = BlockingScheduler()
    for fn, seconds, job_id in jobs:
        sched.add_job(fn, "interval", seconds=seconds, max_instances=1, coalesce=True, id=job_id,
                      next_run_time=datetime.now())
    sched.add_listener(Overruns({job_id: seconds for _, seconds, job_id in jobs}),
                       EVENT_JOB_MAX_INSTANCES | EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    quiet = _QuietSkips()
    logging.getLogger("apscheduler.scheduler").addFilter(quiet)

    def stop(signum, frame) -> None:  # noqa: ARG001
        log.info("signal %s: finishing the running jobs, then stopping", signum)
        threading.Thread(target=sched.shutdown, kwargs={"wait": True}, daemon=True).start()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        sched.start()
    finally:
        logging.getLogger("apscheduler.scheduler").removeFilter(quiet)
        for s, handler in previous.items():
            signal.signal(s, handler)

"""``indexer run``: the poll cycle on an APScheduler 3 interval job (max_instances=1), SIGTERM-safe.

Several pollers on one database never double-ingest: they split each cycle's work through leases in the database
(see :mod:`indexer.poller.leases` and :func:`indexer.poller.cycle.poll_once`).
"""
from __future__ import annotations

import logging
from typing import Callable, Sequence

from indexer.db.url import first_line, is_unreachable
from indexer.poller.cycle import PollSummary, poll_once
from indexer.poller.finality import ChainBehind
from indexer.interval_jobs import Job, run_jobs
from indexer.poller.leases import LeaseLost

log = logging.getLogger(__name__)


def run_forever(url: str, chain_urls: Sequence[str], rpc_urls: Sequence[str], *, interval: float = 30.0,
                on_cycle: Callable[[PollSummary], None] | None = None,
                on_failure: Callable[[Exception], None] | None = None,
                jobs: Sequence[Job] = (), find_url: Callable[[], str | None] | None = None,
                on_url: Callable[[str], None] | None = None, **kw) -> None:
    """Poll every ``interval`` seconds until SIGTERM/SIGINT; a failed cycle is logged and the next one retries.
    ``jobs``: more (callable, seconds, id) interval jobs on the same scheduler (freezing, alerts).

    A cycle that cannot reach the database logs one line (no traceback: nothing in our code to look at). When
    ``find_url`` is given (the URL came from the embedded cluster), the next cycle asks it for the server's URL
    again, since a restarted server may listen on another port; a new URL is passed to ``on_url``."""
    state = {"url": url, "lost": False}

    def job() -> None:
        if state["lost"] and find_url is not None:
            found = find_url()
            if found and found != state["url"]:
                state["url"] = found
                if on_url:
                    on_url(found)
        try:
            summary = poll_once(state["url"], chain_urls, rpc_urls, **kw)
        except LeaseLost as exc:  # fenced out after a pause past the lease: the designed outcome, nothing to debug
            state["lost"] = False
            log.warning("poll cycle ended early: %s; the poller that took the work over goes on from the committed "
                        "cursors, and this one's next cycle takes new leases", exc)
            if on_failure:
                on_failure(exc)
            return
        except Exception as exc:  # noqa: BLE001 - the next cycle retries; the error is in net.cursor
            state["lost"] = is_unreachable(exc)
            if state["lost"]:
                log.warning("poll cycle failed: the database is unreachable (%s); retrying in %.0f s",
                            first_line(exc), interval)
            elif isinstance(exc, ChainBehind):  # the chain's state, not a fault of ours: one line, no traceback
                log.warning("poll cycle skipped: %s; retrying in %.0f s", first_line(exc), interval)
            else:
                log.exception("poll cycle failed")
            if on_failure:
                on_failure(exc)
            return
        state["lost"] = False
        if on_cycle:
            on_cycle(summary)

    run_jobs([(job, interval, "poll"), *jobs])

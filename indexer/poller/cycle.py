"""One poll cycle: chain → epochs, model snapshots, escrows → host logs and stats → records → replay → rules.

Epochs are visited oldest first (current − 2, current − 1, current), so escrows about to be pruned
(``DevshardPruningThreshold = 2``) are captured before newer work. The pieces:

* :mod:`indexer.poller.finality` — each epoch's chain metadata, its escrows still to fetch, its finality state;
* :mod:`indexer.poller.fetch` — one escrow's log, payloads and stats, on fetch threads, with no database handle;
* :mod:`indexer.poller.commit` — chunks committed in order with their cursors; the progress watchdog;
* :mod:`indexer.poller.store` — every statement on the database;
* :mod:`indexer.pipeline` — replay and rules on what changed.

Per escrow, the diff log is read from the ``escrow:<id>`` cursor (last ingested nonce) in runs of pages, the run's
last state root checked against a second host. An escrow whose settled log is complete gets an
``escrow-final:<id>`` cursor and is not fetched again. What is lost and what is recorded when a source is down for
longer than the pruning window: see :mod:`indexer.poller`.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import psycopg

from indexer.poller.commit import ESCROW_WORKERS, CommitPipeline
from indexer.poller.decode import decode_pool
from indexer.poller.fetch import EscrowFetcher
from indexer.poller.finality import PRUNING_WINDOW, Epochs
from indexer.poller.store import Store
from indexer.settings import DEFAULT_VALIDATOR
from indexer.sources.gonka import Gonka, RetryPolicy
from indexer.sources.gonka.signing import Operator
from indexer.wire.normalize import current_epoch

PAYLOAD_WORKERS = 4           # concurrent payload requests (0: each escrow thread fetches its own in turn)
DECODE_WORKERS = 2            # processes decoding diff runs into NDJSON lines (0: decode in the fetch threads)
POLLER_LOCK_KEY = 0x706F6C6C6572  # 'poller'


@dataclass
class PollSummary:
    epoch: int | None = None
    epochs: list[int] = field(default_factory=list)
    epoch_states: dict[int, str] = field(default_factory=dict)
    escrows: int = 0
    escrows_skipped_final: int = 0
    escrows_pruned: int = 0
    escrows_failed: int = 0
    escrows_stalled: int = 0
    diffs: int = 0
    txs: int = 0
    records: int = 0
    loaded: int = 0
    amended: int = 0
    requests: int = 0
    replayed_escrows: int = 0
    rules_epochs: int = 0
    locked_out: bool = False
    seconds: float = 0.0
    # breakdown (seconds): fetch and decode are summed over the fetch threads, the others are wall time
    t_fetch: float = 0.0
    t_decode: float = 0.0
    t_load: float = 0.0
    t_prepare: float = 0.0  # part of t_load: registering sources and typing lines
    transactions: int = 0
    t_replay: float = 0.0
    t_rules: float = 0.0


class Poller:
    def __init__(self, gonka: Gonka, store: Store, *, validator: str = DEFAULT_VALIDATOR,
                 fetch_payloads: bool = True, payload_workers: int = PAYLOAD_WORKERS,
                 escrow_workers: int = ESCROW_WORKERS, decode_workers: int = DECODE_WORKERS) -> None:
        self.g, self.store = gonka, store
        self.summary = PollSummary()
        self._decoders = decode_pool(decode_workers)
        self._payloads = ThreadPoolExecutor(max_workers=max(1, payload_workers), thread_name_prefix="payloads")
        fetcher = EscrowFetcher(gonka, store.fail, validator=validator, fetch_payloads=fetch_payloads,
                                payload_pool=self._payloads if payload_workers > 0 else None,
                                decoders=self._decoders)
        self.pipeline = CommitPipeline(fetcher, store, self.summary, escrow_workers=escrow_workers)
        self.epochs = Epochs(gonka, store, self.summary, self._payloads)

    def close(self) -> None:
        self.pipeline.close()
        self._payloads.shutdown(wait=True)
        if self._decoders is not None:
            self._decoders.shutdown(wait=True)

    def cycle(self) -> PollSummary:
        info = self.g.chain.epoch_info()
        now = current_epoch(info)
        s = self.summary
        s.epoch = now
        s.epochs = [e for e in range(now - PRUNING_WINDOW, now + 1) if e >= 0]
        states = self.store.epoch_states()
        self.epochs.prune(now, states)
        todo = []
        for epoch in s.epochs:
            if states.get(epoch) == "final":
                s.epoch_states[epoch] = "final"
            else:
                todo.append(epoch)
        if todo:
            settlements = self.epochs.settlements(self.epochs.window_start_height(info))
            # chain metadata of every epoch first, then all their escrows through one pipeline (oldest epoch
            # first, so the fetch threads never idle at an epoch boundary), then each epoch's stats and state
            plans = [self.epochs.plan(epoch, info if epoch == now else None) for epoch in todo]
            cursors = self.store.cursors("escrow")
            jobs = list({eid: (epoch, eid) for epoch, ids, pending in reversed(plans) for eid in pending}.values())
            jobs.sort(key=lambda j: todo.index(j[0]))  # an id listed by two epochs is fetched once, with the older
            done = self.pipeline.run(jobs, settlements, cursors)
            for epoch, ids, pending in plans:
                self.epochs.finish(epoch, ids, pending, done)
        self.store.load([], "poll", {"chain": str(now)})
        return s


def poll_once(url: str, chain_urls: str | Sequence[str], rpc_url: str | Sequence[str], *,
              policy: RetryPolicy | None = None, process: bool = True, archive: bool = True,
              validator: str = DEFAULT_VALIDATOR, operator: Operator | None = None, fetch_payloads: bool = True,
              payload_workers: int = PAYLOAD_WORKERS, escrow_workers: int = ESCROW_WORKERS,
              decode_workers: int = DECODE_WORKERS) -> PollSummary:
    """One full cycle into the database at ``url``. A cycle that cannot take the poller lock does nothing."""
    from indexer.pipeline import process_changes

    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        if not conn.execute("SELECT pg_try_advisory_lock(%s)", (POLLER_LOCK_KEY,)).fetchone()[0]:
            return PollSummary(locked_out=True)
        try:
            store = Store(conn, archive=archive, side_url=url)
            with Gonka(chain_urls, rpc_url, policy=policy, on_response=store.on_response,
                       on_failure=store.on_failure, operator=operator) as gonka:
                poller = Poller(gonka, store, validator=validator, fetch_payloads=fetch_payloads,
                                payload_workers=payload_workers, escrow_workers=escrow_workers,
                                decode_workers=decode_workers)
                error = None
                try:
                    summary = poller.cycle()
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    raise
                finally:
                    poller.close()  # fetch threads stop first: their last failures are queued by now
                    poller.summary.requests = gonka.requests()
                    try:
                        store.finish_cycle(url, error)
                    finally:
                        store.close()
            summary.t_load = store.seconds
            summary.t_prepare, summary.transactions = store.t_prepare, store.transactions
            if process:
                downstream = process_changes(conn, url, loaded_rows=summary.loaded)
                summary.replayed_escrows = downstream.replay.escrows
                summary.rules_epochs = downstream.rules.epochs
                summary.t_replay, summary.t_rules = downstream.replay.seconds, downstream.rules.seconds
        finally:
            if not conn.broken:  # a dropped session released its advisory lock with it
                conn.execute("SELECT pg_advisory_unlock(%s)", (POLLER_LOCK_KEY,))
    summary.seconds = time.perf_counter() - start
    return summary

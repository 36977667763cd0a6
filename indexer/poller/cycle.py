"""One poll cycle: chain → epochs, model snapshots, escrows → host logs and stats → records → replay → rules.

Epochs are visited oldest first (current − 2, current − 1, current), so escrows about to be pruned
(``DevshardPruningThreshold = 2``) are captured before newer work. The pieces:

* :mod:`indexer.poller.finality` — each epoch's chain metadata (its snapshot read on a thread of its own while the
  escrows are fetched, and loaded after them), its escrows still to fetch, its finality state;
* :mod:`indexer.poller.fetch` — one escrow's log, payloads and stats, on fetch threads, with no database handle;
* :mod:`indexer.poller.commit` — chunks committed in order with their cursors; the progress watchdog;
* :mod:`indexer.poller.awaited` — payloads no member served when their 0/0 Finish was stored, asked again each
  cycle after the escrows (a bounded batch, with backoff, until served or given up);
* :mod:`indexer.poller.store` — every statement on the database;
* :mod:`indexer.downstream` — replay and rules on what changed.

Per escrow, the diff log is read from the ``escrow:<id>`` cursor (last ingested nonce) in runs of pages, the run's
last state root checked against a second host. An escrow whose settled log is complete, and whose settlement
height is known, gets an ``escrow-final:<id>`` cursor and is not fetched again. The settlements are read once at
the cycle's start; an escrow that settles after that read (escrows settle all through an epoch) has its own
settlement looked up when it is fetched (:meth:`indexer.poller.settled.SettledReads._settlement`), and stays not
final, fetched again next cycle, while that finds nothing. What is lost and what is recorded when a source is down for
longer than the pruning window: see :mod:`indexer.poller`.

Several pollers on one database split a cycle through leases (:mod:`indexer.poller.leases`): an epoch's chain work
(snapshot, then host stats and state once its escrows are done) under ``epoch:<E>``, each escrow under
``escrow:<id>``. Every poller lists every epoch's escrows and skips what another holds; it then waits, looking at
the leases every :attr:`~indexer.poller.leases.Leases.tick`, until each skipped unit is released (done) or has
expired (its holder died: this poller takes it over). So a cycle that returns has seen all of its work done once,
by someone, and its replay and rules run on all of it.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import psycopg

from indexer.poller.awaited import AwaitedPayloads, AwaitPolicy
from indexer.poller.commit import ESCROW_WORKERS, EscrowCommitter
from indexer.poller.decode import decode_pool
from indexer.poller.fetch import EscrowFetcher
from indexer.poller.finality import PRUNING_WINDOW, Epochs
from indexer.poller.upgrades import resolve_upgrade_heights
from indexer.poller.leases import DEFAULT_LEASE_SECONDS, Leases
from indexer.poller.store import ARCHIVE_DAYS, Store
from indexer.settings import DEFAULT_VALIDATOR
from indexer.sources.gonka import Gonka, RetryPolicy
from indexer.sources.gonka.signing import Operator
from indexer.wire.normalize import current_epoch

log = logging.getLogger(__name__)

PAYLOAD_WORKERS = 4           # concurrent payload requests (0: each escrow thread fetches its own in turn)
DECODE_WORKERS = 2            # processes decoding diff runs into NDJSON lines (0: decode in the fetch threads)


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
    holder: str = ""                # this poller's lease holder id (hostname:pid:random)
    escrows_elsewhere: int = 0      # escrows another poller fetched (held, or done during this cycle)
    epochs_elsewhere: int = 0       # epochs whose chain work another poller did
    takeovers: int = 0              # expired leases of another (dead or stalled) poller taken over
    payloads_asked: int = 0         # awaited payloads asked again this cycle (indexer.poller.awaited)
    payloads_obtained: int = 0      # of which served, and loaded into their Finish
    payloads_given_up: int = 0      # of which given up (their last allowed attempt)
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
    def __init__(self, gonka: Gonka, store: Store, *, leases: Leases, validator: str = DEFAULT_VALIDATOR,
                 fetch_payloads: bool = True, payload_workers: int = PAYLOAD_WORKERS,
                 escrow_workers: int = ESCROW_WORKERS, decode_workers: int = DECODE_WORKERS,
                 awaiting: AwaitPolicy | None = None) -> None:
        self.g, self.store = gonka, store
        self.leases = leases
        self.validator, self.fetch_payloads = validator, fetch_payloads
        self.awaiting = awaiting or AwaitPolicy()
        self.summary = PollSummary()
        self._decoders = decode_pool(decode_workers)
        self._payloads = ThreadPoolExecutor(max_workers=max(1, payload_workers), thread_name_prefix="payloads")
        self._chain_reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshots")
        self._upgrades_asked: int | None = None  # the epoch the unknown upgrade heights were last asked in
        fetcher = EscrowFetcher(gonka, store.fail, validator=validator, fetch_payloads=fetch_payloads,
                                payload_pool=self._payloads if payload_workers > 0 else None,
                                decoders=self._decoders, payload_concurrency=payload_workers)
        self.committer = EscrowCommitter(fetcher, store, self.summary, escrow_workers=escrow_workers, leases=leases)
        self.epochs = Epochs(gonka, store, self.summary, self._payloads, leases)

    def close(self) -> None:
        self.committer.close()
        self._chain_reads.shutdown(wait=True)
        self._payloads.shutdown(wait=True)
        if self._decoders is not None:
            self._decoders.shutdown(wait=True)

    def cycle(self) -> PollSummary:
        states = self.store.epoch_states()
        info = self.epochs.current(states)  # a node behind the stored epochs is not read
        now = current_epoch(info)
        s = self.summary
        s.epoch = now
        s.epochs = [e for e in range(now - PRUNING_WINDOW, now + 1) if e >= 0]
        if self._upgrades_asked != now:  # unknown upgrade heights: asked again when a new epoch starts
            resolve_upgrade_heights(self.g.chain, self.store.conn, self.store.fail)
            self._upgrades_asked = now
        self.epochs.prune(now, states)
        todo = []
        for epoch in s.epochs:
            if states.get(epoch) == "final":
                s.epoch_states[epoch] = "final"
            else:
                todo.append(epoch)
        if todo:
            self._epochs(todo, now, info)
        if self.fetch_payloads:
            self._awaited()
        self.store.load([], "poll", {"chain": str(now)})
        return s

    def _awaited(self) -> None:
        """Payloads still missing from stored 0/0 Finishes, asked again (:mod:`indexer.poller.awaited`): a batch
        of the due ones, after the escrows (a Finish stored this cycle is not due before the next one). A batch
        that fails does not fail the cycle: its attempt is counted, the error logged and kept in net.failure
        (source ``payloads``), and the cycle goes on to its cursor."""
        job = AwaitedPayloads(self.g, self.store, holder=self.leases.holder, since=self.leases.since,
                              validator=self.validator, policy=self.awaiting,
                              pool=self._payloads if self.committer.fetcher.payload_pool is not None else None)
        try:
            job.run()
        except Exception as exc:  # noqa: BLE001 - the payloads wait; the cycle's own work and cursor go on
            # the batch counted its attempt (AwaitedPayloads.run); said once here and in net.failure
            message = f"awaited payloads not asked this cycle: {type(exc).__name__}: {exc}"
            log.warning("%s", message.splitlines()[0][:500])
            self.store.fail("payloads", "", message, True)
        finally:
            s = self.summary
            s.payloads_asked, s.payloads_obtained, s.payloads_given_up = job.asked, job.obtained, job.given_up

    def _epochs(self, todo: list[int], now: int, info: dict) -> None:
        """Chain metadata of every epoch first, then all their escrows through one committer (oldest epoch first,
        so the fetch threads never idle at an epoch boundary), then each epoch's stats and state — each piece by
        whichever poller holds its lease; what others hold is waited for, or taken over once expired."""
        s = self.summary
        settlements = self.epochs.settlements(self.epochs.window_start_height(info))
        plans: dict[int, tuple[list[str], list[str]]] = {}
        mine: list[int] = []        # epochs whose chain work is this poller's
        waiting: set[str] = set()   # leases of skipped work another poller holds
        captures = []               # (epoch, its snapshot's chain reads, running beside the escrows)
        for epoch in todo:
            outcome = self.leases.take(f"epoch:{epoch}").outcome
            if outcome == "done":   # another poller did the whole epoch, its escrows included, during this cycle
                s.epochs_elsewhere += 1
                continue
            if outcome == "taken":
                captures.append((epoch, self._chain_reads.submit(self.epochs.capture, epoch)))
                mine.append(epoch)
            else:
                waiting.add(f"epoch:{epoch}")
            plans[epoch] = self.epochs.listing(epoch)
        owner: dict[str, int] = {}  # an id listed by two epochs is fetched once, with the older
        for epoch in reversed(list(plans)):
            owner.update({eid: epoch for eid in plans[epoch][1]})
        jobs = sorted(((epoch, eid) for eid, epoch in owner.items()), key=lambda j: todo.index(j[0]))
        done = self.committer.run(jobs, settlements)  # a failed one leaves the reads to close(), which waits for them
        # the snapshots load after the escrows: nothing in the load of an escrow reads them, and the reads (dozens
        # of chain requests an epoch) would otherwise hold back the first escrow's fetch
        read = [(epoch, future.result()) for epoch, future in captures]
        answered = {epoch for epoch, cap in read if cap.absent is None and not any(f.what == "root"
                                                                                  for f in cap.failures)}
        for epoch, cap in read:
            self.epochs.load_snapshot(epoch, cap, info if epoch == now else None, answered, len(plans[epoch][0]))
        waiting |= self._skipped()
        finished: set[int] = set()
        while True:
            # an epoch of this poller is finished once no escrow of it is in another poller's hands
            for epoch in mine:
                if epoch not in finished and not any(f"escrow:{e}" in waiting for e in plans[epoch][1]):
                    self.epochs.finish(epoch, plans[epoch][0], done)
                    self.epochs.release(epoch)
                    finished.add(epoch)
            if not waiting:
                break
            self.leases.wait(self.leases.tick)
            retry: list[tuple[int, str]] = []
            for resource, state in sorted(self.leases.status(waiting).items()):
                if state == "done":
                    waiting.discard(resource)
                elif state == "free":  # expired: its holder died or stalled
                    kind, key = resource.split(":", 1)
                    if kind == "escrow":  # the committer takes it over (or finds it done meanwhile)
                        waiting.discard(resource)
                        retry.append((owner[key], key))
                    elif (outcome := self.leases.take(resource).outcome) != "held":
                        waiting.discard(resource)
                        if outcome == "taken":
                            self.epochs.snapshot(int(key), info if int(key) == now else None)
                            mine.append(int(key))
            if retry:
                done.update(self.committer.run(retry, settlements))
                waiting |= self._skipped()
        s.escrows_elsewhere = sum(1 for eid in owner if eid not in done)
        s.epochs_elsewhere += len(plans) - len(mine)
        s.takeovers = len(self.leases.takeovers)

    def _skipped(self) -> set[str]:
        """Leases of the escrows the committer's last run skipped because another poller holds them."""
        return {f"escrow:{eid}" for eid, why in self.committer.skipped.items() if why == "held"}


def poll_once(url: str, chain_urls: str | Sequence[str], rpc_url: str | Sequence[str], *,
              policy: RetryPolicy | None = None, process: bool = True, archive: bool = True,
              validator: str = DEFAULT_VALIDATOR, operator: Operator | None = None, fetch_payloads: bool = True,
              payload_workers: int = PAYLOAD_WORKERS, escrow_workers: int = ESCROW_WORKERS,
              decode_workers: int = DECODE_WORKERS, lease_seconds: float = DEFAULT_LEASE_SECONDS,
              holder: str | None = None, private_hosts: bool = False,
              archive_days: float | None = ARCHIVE_DAYS, awaiting: AwaitPolicy | None = None) -> PollSummary:
    """One full cycle into the database at ``url``, sharing the work with any other poller on it through leases of
    ``lease_seconds`` (``holder``: this poller's lease holder id, default hostname:pid:random). ``private_hosts``:
    hosts may be on loopback or private addresses (a devnet); ``archive_days``: net.raw_response's retention;
    ``awaiting``: how missing payloads are asked again (:class:`indexer.poller.awaited.AwaitPolicy`)."""
    from indexer.downstream import process_changes

    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        leases = Leases(url, seconds=lease_seconds, holder=holder).start()
        error = None
        try:
            store = Store(conn, archive=archive, side_url=url, leases=leases, archive_days=archive_days)
            def on_response(*args) -> None:  # every answer or failed attempt is progress (leases stay renewed)
                leases.touch()
                store.on_response(*args)

            def on_failure(*args, **kw) -> None:
                leases.touch()
                store.on_failure(*args, **kw)

            def on_diagnosis(source: str, url: str, message: str, transient: bool) -> None:
                store.fail(source, url, message, transient)  # which payload route a host speaks

            with Gonka(chain_urls, rpc_url, policy=policy, on_response=on_response, on_failure=on_failure,
                       operator=operator, private_hosts=private_hosts, on_diagnosis=on_diagnosis) as gonka:
                poller = Poller(gonka, store, validator=validator, fetch_payloads=fetch_payloads,
                                payload_workers=payload_workers, escrow_workers=escrow_workers,
                                decode_workers=decode_workers, leases=leases, awaiting=awaiting)
                poller.summary.holder = leases.holder
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
        finally:
            # a failed cycle gives back what it still holds at once; a finished one holds nothing by now
            leases.close(failed=error is not None)
        summary.t_load = store.seconds
        summary.t_prepare, summary.transactions = store.t_prepare, store.transactions
        if process:
            # several pollers may run this at once: replay and rules claim their dirty marks with SKIP LOCKED
            downstream = process_changes(conn, url, loaded=store.loaded)
            summary.replayed_escrows = downstream.replay.escrows
            summary.rules_epochs = downstream.rules.epochs
            summary.t_replay, summary.t_rules = downstream.replay.seconds, downstream.rules.seconds
    summary.seconds = time.perf_counter() - start
    return summary

"""Epochs in the poller: what each epoch's chain metadata is, which of its escrows remain to fetch, and when it is
done (``net.epoch_state``; ``epoch:<E>`` rows in ``api.ingest_status`` whose cursor is the state):

* ``open``: the current epoch; escrows are still being written.
* ``settling``: an earlier epoch with an escrow not yet settled and completely captured, or whose
  ``host_epoch_stats`` have not yet been read identically on two consecutive polls (they are provisional just after
  the transition). Settling epochs are re-polled every cycle: their unfinished escrows and all their host stats.
* ``final``: every escrow final, the stats stable (an epoch without escrows: two identical, empty reads) and every
  chain read of the epoch's snapshot succeeded (``reason = 'complete'``), or the epoch left the pruning window
  while settling (``reason = 'pruned'``), or was pruned before any cycle saw it (``reason = 'missed'``). A final
  epoch is not polled again.

Epoch snapshot (:func:`indexer.sources.gonka.snapshots.capture_epoch`, every cycle for every epoch not final): the
epoch record with its heights, model snapshots, ``epoch_params`` (read as of the epoch where the node still has the
height) and, once ended, ``participant_epoch``. A failed read is a warning in the log, a ``net.failure`` row, the
``last_error`` of its ``snapshot:<E>:…`` source in ``api.ingest_status`` and a ``net.snapshot_failure`` row (so
``api.model_limits`` shows a model whose read failed, with the reason); it is retried every cycle. A 404 for the
epoch's root group is "no such epoch" (before the chain's first, not formed yet) unless the chain has epochs on
both sides of it (a later one answered in the cycle, an earlier one answered or is stored): then it is such a
failed read (``snapshot:<E>:root``), and so is one for an epoch that tx_search lists escrows for; the epoch is not
final until the group is read.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from concurrent.futures import Executor
from typing import Sequence

from indexer.poller.fetch import EscrowDone
from indexer.poller.settled import Settlement, settlements_from
from indexer.poller.leases import Leases
from indexer.poller.store import Store
from indexer.sources.gonka import FetchError, Gonka
from indexer.sources.gonka.snapshots import EpochCapture, capture_epoch
from indexer.wire.chain_records import epoch_info_parts
from indexer.sources.gonka.chain import PREFIX
from indexer.wire.normalize import (NormalizeError, current_epoch, dumps_record_bytes, epoch_record,
                                    host_epoch_stats_record)

log = logging.getLogger(__name__)

PRUNING_WINDOW = 2            # DevshardPruningThreshold: the chain keeps the current epoch and the two before


class ChainBehind(FetchError):
    """Every chain node reports a current epoch before the newest one the database has a state for: nodes still
    syncing, or a load balancer's lagging node. Nothing is read from them this cycle, which fails (a transient
    failure on ``chain``); the next cycle asks again."""


class Epochs:
    def __init__(self, gonka: Gonka, store: Store, summary, pool: Executor, leases: Leases) -> None:
        self.g, self.store, self.summary = gonka, store, summary
        self.leases = leases  # each epoch's writes under its ``epoch:<E>`` lease
        self._pool = pool  # host epoch stats are many small independent reads
        self._snapshot_complete: dict[int, bool] = {}  # epoch -> every chain read of its snapshot succeeded

    def prune(self, now: int, states: dict[int, str]) -> None:
        """Epochs that left the window unfinished become final ('pruned'); their unfinished escrows are gaps. Their
        snapshots are read once more first: the chain keeps epoch groups and performance summaries after devshard
        pruning, so heights and participants are complete (parameters at the epoch's height only while the node
        keeps that state; else live values stand in, flagged inexact)."""
        for epoch in sorted(e for e, st in states.items() if st != "final" and e < now - PRUNING_WINDOW):
            if not self.take(epoch):
                continue  # another poller prunes it (if it dies, a later cycle does, once its lease expired)
            self.snapshot(epoch)
            ids = self.created_ids(epoch)
            final = self.store.final_escrows(ids)
            final |= self.store.captured_whole([eid for eid in ids if eid not in final])  # REST-read settlement
            lost = [eid for eid in ids if eid not in final]
            self._lost(epoch, lost, f"epoch {epoch} pruned before escrow was final")
            if lost:
                log.warning("epoch %s pruned while settling: %d escrow(s) not final", epoch, len(lost))
            self.store.commit_epoch_state(epoch, "final", len(ids), len(ids) - len(lost), None, reason="pruned",
                                          fence=self.fence(epoch))
            if lost:
                self.store.error(f"epoch:{epoch}", f"pruned while settling: {len(lost)} of {len(ids)} escrow(s) "
                                                   f"not final")
            self.summary.epoch_states[epoch] = "final"
            self.release(epoch)
        # epochs that came and went while the poller was away (its last cycle is older than the window)
        if states:
            for epoch in range(max(states) + 1, now - PRUNING_WINDOW):
                if not self.take(epoch):
                    continue
                log.warning("epoch %s was pruned before the poller saw it", epoch)
                msg = ("epoch pruned before the poller saw it (the poller or its sources were down longer than the "
                       "pruning window)")
                self.snapshot(epoch)
                ids = self.created_ids(epoch)
                self._lost(epoch, ids, f"epoch {epoch} pruned before the poller saw it")
                self.store.fail(f"epoch:{epoch}", "", msg, False)
                self.store.commit_epoch_state(epoch, "final", len(ids), 0, None, reason="missed",
                                              fence=self.fence(epoch))
                self.store.error(f"epoch:{epoch}", msg)
                self.summary.epoch_states[epoch] = "final"
                self.release(epoch)

    def current(self, states: dict[int, str]) -> dict:
        """``epoch_info`` from a node that is not behind the stored epochs (``states``: epoch → stored state). A node
        whose current epoch has a stored state while a newer epoch has one too is behind (a node still syncing, a
        load balancer's lagging node): read as the chain's present, its epoch would be ``open`` again, its stable
        stats forgotten, and its stale answers would amend what newer blocks settled. It is recorded
        (``net.failure``, naming it) and asked last from then on; with every node behind, :class:`ChainBehind` ends
        the cycle before anything is read or written. An epoch the database has no state for is not judged: the
        database may hold another network's epochs (a demo's devnet in the embedded database), and nothing stored
        is taken back by it."""
        seen = max(states, default=None)
        http = self.g.chain.http
        said = []
        for _ in range(len(http.base_urls)):
            info, node = self.g.chain.epoch_info_from()
            now = current_epoch(info)
            if seen is None or now >= seen or now not in states:
                return info
            url = f"{node}{PREFIX}/epoch_info"
            http.distrust(node, FetchError(url, f"node behind: its current epoch is {now}, but epoch {seen} is "
                                                f"stored already (a node still syncing, or a lagging node behind a "
                                                f"load balancer): not read this cycle", transient=True))
            said.append(f"{url}: epoch {now}")
        raise ChainBehind("chain", f"every chain node is behind epoch {seen}, the newest the database has a state "
                                   f"for ({'; '.join(said)}): nothing is read from them this cycle", transient=True)

    # -- the epoch:<E> lease (several pollers) ----------------------------------------------------------
    def take(self, epoch: int) -> bool:
        """Whether this poller does epoch E's chain work now."""
        return self.leases.take(f"epoch:{epoch}").outcome == "taken"

    def fence(self, epoch: int) -> tuple[str, ...]:
        return (f"epoch:{epoch}",)

    def release(self, epoch: int) -> None:
        self.leases.release([f"epoch:{epoch}"])

    def created_ids(self, epoch: int) -> list[str]:
        """The epoch's escrow ids from its creation events (blocks are not pruned, so these outlive the escrows);
        what was stored of it when tx_search does not answer."""
        try:
            created = self.listed_ids(epoch)
        except (FetchError, NormalizeError) as exc:
            log.warning("epoch %s: escrow list from tx_search failed (%s); using the stored escrows", epoch, exc)
            return self.store.escrow_ids(epoch)
        return list(dict.fromkeys(created + self.store.escrow_ids(epoch)))

    def listed_ids(self, epoch: int) -> list[str]:
        """The epoch's escrow ids from their creation events (tx_search), in id order."""
        created = self.g.rpc.escrows_created(epoch)
        ids = list(dict.fromkeys(ev.attributes["escrow_id"] for ev in created if ev.attributes.get("escrow_id")))
        ids.sort(key=lambda x: int(x) if x.isascii() and x.isdigit() else 0)
        return ids

    def _lost(self, epoch: int, escrow_ids: Sequence[str], message: str) -> None:
        """Escrows whose data left the chain before they were final: a net.failure row each and the reason on
        their ``escrow:<id>`` row of api.ingest_status (the cursor, if any, keeps what was captured)."""
        for eid in escrow_ids:
            self.store.fail(f"escrow:{eid}", "", message, False)
        if escrow_ids:
            self.store.errors([f"escrow:{eid}" for eid in escrow_ids], message)

    def window_start_height(self, info: dict) -> int:
        """A height before the window's oldest settlement: current epoch start − (window + 1) epoch lengths. The
        epoch length is ``params.epoch_params.epoch_length`` of the real ``epoch_info``; when it cannot be read the
        search starts at 0 (every settlement the chain made), which is said loudly, never silently."""
        try:
            _, start, length, _ = epoch_info_parts(info)
        except NormalizeError as exc:
            start = length = None
            why = str(exc)
        else:
            why = "epoch_info has no poc_start_block_height or epoch_length"
        if start is None or length is None:
            log.warning("settlement window start unknown (%s): searching settlements from height 0", why)
            self.store.error("chain:epoch_info", f"settlement window start unknown: {why}")
            return 0
        return max(0, start - (PRUNING_WINDOW + 1) * length)

    def settlements(self, min_height: int) -> dict[str, Settlement]:
        """escrow_id → its settlement: protocol version (state_root_and_protocol_version) and height."""
        try:
            events = self.g.rpc.escrows_settled(min_height)
        except (FetchError, NormalizeError) as exc:
            self.store.error("rpc:settled", str(exc))
            return {}
        return settlements_from(events)

    def listing(self, epoch: int) -> tuple[list[str], list[str]]:
        """(its escrow ids, the ids still to fetch), without writing anything (another poller may hold the epoch's
        lease)."""
        ids = self.listed_ids(epoch)
        final = self.store.final_escrows(ids)
        self.summary.escrows_skipped_final += sum(e in final for e in ids)
        return ids, [e for e in ids if e not in final]

    def snapshot(self, epoch: int, info: dict | None = None) -> None:
        """Capture and load the epoch's snapshot (heights, model args, parameters, participants); failed reads are
        logged, recorded and shown in api.ingest_status."""
        self.load_snapshot(epoch, self.capture(epoch), info)

    def capture(self, epoch: int) -> EpochCapture:
        """The chain reads of the epoch's snapshot, without the database (a cycle runs them beside its escrows)."""
        return capture_epoch(self.g.chain, epoch, ended=epoch < (self.summary.epoch or 0), mapper=self._pool.map)

    def load_snapshot(self, epoch: int, cap: EpochCapture, info: dict | None = None,
                      answered: set[int] | None = None, escrows: int = 0) -> None:
        """Load a captured snapshot under the epoch's lease; its failed reads logged and recorded. ``answered``: the
        epochs whose root group this cycle read; ``escrows``: how many escrows tx_search lists for the epoch. A 404
        for this epoch's root group while a later one answered and an earlier one is known (answered, or stored),
        or while the epoch has escrows, is a failed read, not "no such epoch": the chain has that epoch."""
        if cap.absent is not None and answered is not None:
            why = ("epochs before and after it answer" if self._inside(epoch, answered)
                   else "tx_search lists escrows of it" if escrows else None)
            if why is not None:
                cap.failures.append(replace(cap.absent, error=f"epoch {epoch} has no epoch group (HTTP 404) although "
                                                              f"{why}: {cap.absent.error}"))
        records = cap.records
        if info is not None and not any(r["kind"] == "epoch" for r in records):
            records.insert(0, epoch_record(info))  # the root group failed: the current epoch's start is still known
        records = self._keep_exact_grants(epoch, records)
        self._snapshot_complete[epoch] = cap.complete
        for f in cap.failures:
            subject = (f"model {f.model_id}" if f.model_id else f"participant {f.participant}" if f.participant
                       else f.what)
            log.warning("epoch %s %s: chain read failed on %s: %s", f.epoch, subject, f.host, f.error)
            self.store.fail(f.source, f.url, f.error, f.transient)
        self.store.load_many([([dumps_record_bytes(r) for r in records], f"chain:epoch_group_data/{epoch}")], None,
                             after=lambda c: self.store.snapshot_outcome(c, cap.failures, cap.succeeded),
                             fence=self.fence(epoch))

    def _keep_exact_grants(self, epoch: int, records: list[dict]) -> list[dict]:
        """``records`` without the live-read warm keys (the epoch's end height pruned) of participants whose grants
        are stored as read at the epoch's end: a later, inexact read never replaces the epoch's own grants (as an
        exact params snapshot is kept, indexer.load.statements.KEEP_STORED)."""
        def live(r: dict) -> bool:
            return r["kind"] == "warm_key" and r.get("read_exact") is not True

        if not any(live(r) for r in records):
            return records
        exact = self.store.exactly_granted(epoch)
        return [r for r in records if not (live(r) and r["participant"] in exact)]

    def _inside(self, epoch: int, answered: set[int]) -> bool:
        """Whether the chain has epochs on both sides of ``epoch``: a later one answered this cycle, an earlier one
        answered or is stored."""
        return any(e > epoch for e in answered) and (any(e < epoch for e in answered)
                                                     or self.store.epoch_known_before(epoch))

    def finish(self, epoch: int, ids: list[str], done: dict[str, EscrowDone]) -> None:
        """Host epoch stats of the epoch's participants, and its finality state."""
        participants: dict[str, None] = {}
        # final escrows as committed, by this poller or by another one that held their leases this cycle
        final = self.store.final_escrows(ids)
        n_final = sum(e in final for e in ids)
        stored = self.store.stored_slots([e for e in ids if e not in done])  # final before, or another poller's
        for escrow_id in ids:
            d = done.get(escrow_id)
            slots = stored.get(escrow_id, []) if d is None else d.slots or []
            for addr in slots:
                participants[addr] = None
        stats = self.host_epoch_stats(epoch, list(participants))
        if epoch >= (self.summary.epoch or 0):
            state, digest = "open", None
        else:
            digest = hashlib.sha256(b"\n".join(sorted(dumps_record_bytes(r) for r in stats))).hexdigest()
            # an epoch without escrows has no stats to wait for: two identical (empty) polls make it stable
            stable = self.store.stats_digest(epoch) == digest and (bool(stats) or not ids)
            complete = self._snapshot_complete.get(epoch, True)  # a failed snapshot read is retried, not frozen
            state = "final" if stable and complete and n_final == len(ids) else "settling"
        self.summary.epoch_states[epoch] = state
        self.store.load_many([([dumps_record_bytes(r) for r in stats], f"chain:devshard_host_epoch_stats/{epoch}")],
                             None, after=lambda c: self.store.set_epoch_state(
                                 c, epoch, state, len(ids), n_final, digest,
                                 reason="complete" if state == "final" else None), fence=self.fence(epoch))

    def host_epoch_stats(self, epoch: int, participants: Sequence[str]) -> list[dict]:
        if epoch >= (self.summary.epoch or 0):
            return []  # stats appear once the epoch's escrows settle

        def one(addr: str) -> dict | None:
            try:
                return host_epoch_stats_record(self.g.chain.host_epoch_stats(epoch, addr), epoch, addr)
            except FetchError as exc:
                if exc.transient:
                    raise
                return None
            except NormalizeError as exc:  # another host's or epoch's stats: not taken, and asked again
                raise FetchError(f"chain:devshard_host_epoch_stats/{epoch}/{addr}", str(exc)) from None

        return [rec for rec in self._pool.map(one, participants) if rec]

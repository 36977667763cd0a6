"""Epochs in the poller: what each epoch's chain metadata is, which of its escrows remain to fetch, and when it is
done (``net.epoch_state``; ``epoch:<E>`` rows in ``api.ingest_status`` whose cursor is the state):

* ``open``: the current epoch; escrows are still being written.
* ``settling``: an earlier epoch with an escrow not yet settled and completely captured, or whose
  ``host_epoch_stats`` have not yet been read identically on two consecutive polls (they are provisional just after
  the transition). Settling epochs are re-polled every cycle: their unfinished escrows and all their host stats.
* ``final``: every escrow final and the stats stable (``reason = 'complete'``), or the epoch left the pruning window
  while settling (``reason = 'pruned'``), or was pruned before any cycle saw it (``reason = 'missed'``). A final
  epoch is not polled again.
"""
from __future__ import annotations

import hashlib
import logging
from concurrent.futures import Executor
from typing import Any, Sequence

from indexer.poller.fetch import EscrowDone
from indexer.poller.store import Store
from indexer.sources.gonka import FetchError, Gonka
from indexer.wire.normalize import (NormalizeError, dumps_record_bytes, epoch_record, host_epoch_stats_record,
                                    model_snapshot_record, parse_u64)

log = logging.getLogger(__name__)

PRUNING_WINDOW = 2            # DevshardPruningThreshold: the chain keeps the current epoch and the two before


class Epochs:
    def __init__(self, gonka: Gonka, store: Store, summary, pool: Executor) -> None:
        self.g, self.store, self.summary = gonka, store, summary
        self._pool = pool  # host epoch stats are many small independent reads

    def prune(self, now: int, states: dict[int, str]) -> None:
        """Epochs that left the window unfinished become final ('pruned'); their unfinished escrows are gaps."""
        final = self.store.cursors("escrow-final:")
        for epoch in sorted(e for e, st in states.items() if st != "final" and e < now - PRUNING_WINDOW):
            ids = self.created_ids(epoch)
            lost = [eid for eid in ids if f"escrow-final:{eid}" not in final]
            self._lost(epoch, lost, f"epoch {epoch} pruned before escrow was final")
            if lost:
                log.warning("epoch %s pruned while settling: %d escrow(s) not final", epoch, len(lost))
            self.store.commit_epoch_state(epoch, "final", len(ids), len(ids) - len(lost), None, reason="pruned")
            if lost:
                self.store.error(f"epoch:{epoch}", f"pruned while settling: {len(lost)} of {len(ids)} escrow(s) "
                                                   f"not final")
            self.summary.epoch_states[epoch] = "final"
        # epochs that came and went while the poller was away (its last cycle is older than the window)
        if states:
            for epoch in range(max(states) + 1, now - PRUNING_WINDOW):
                log.warning("epoch %s was pruned before the poller saw it", epoch)
                msg = ("epoch pruned before the poller saw it (the poller or its sources were down longer than the "
                       "pruning window)")
                ids = self.created_ids(epoch)
                self._lost(epoch, ids, f"epoch {epoch} pruned before the poller saw it")
                self.store.fail(f"epoch:{epoch}", "", msg, False)
                self.store.commit_epoch_state(epoch, "final", len(ids), 0, None, reason="missed")
                self.store.error(f"epoch:{epoch}", msg)
                self.summary.epoch_states[epoch] = "final"

    def created_ids(self, epoch: int) -> list[str]:
        """The epoch's escrow ids from its creation events (blocks are not pruned, so these outlive the escrows);
        what was stored of it when tx_search does not answer."""
        try:
            created = self.g.rpc.escrows_created(epoch)
        except (FetchError, NormalizeError) as exc:
            log.warning("epoch %s: escrow list from tx_search failed (%s); using the stored escrows", epoch, exc)
            return self.store.escrow_ids(epoch)
        ids = list(dict.fromkeys(ev.attributes["escrow_id"] for ev in created if ev.attributes.get("escrow_id")))
        ids += [eid for eid in self.store.escrow_ids(epoch) if eid not in ids]
        return ids

    def _lost(self, epoch: int, escrow_ids: Sequence[str], message: str) -> None:
        """Escrows whose data left the chain before they were final: a net.failure row each and the reason on
        their ``escrow:<id>`` row of api.ingest_status (the cursor, if any, keeps what was captured)."""
        for eid in escrow_ids:
            self.store.fail(f"escrow:{eid}", "", message, False)
        if escrow_ids:
            self.store.errors([f"escrow:{eid}" for eid in escrow_ids], message)

    @staticmethod
    def window_start_height(info: dict) -> int:
        """A height before the window's oldest settlement: current epoch start − (window + 1) epoch lengths."""
        try:
            start = parse_u64((info.get("latest_epoch") or {}).get("poc_start_block_height"), "poc_start")
            length = parse_u64((info.get("params") or {}).get("epoch_length"), "epoch_length")
        except NormalizeError:
            return 0
        return max(0, start - (PRUNING_WINDOW + 1) * length)

    def settled_versions(self, min_height: int) -> dict[str, str]:
        """escrow_id → protocol version from its settlement event (state_root_and_protocol_version)."""
        try:
            events = self.g.rpc.escrows_settled(min_height)
        except (FetchError, NormalizeError) as exc:
            self.store.error("rpc:settled", str(exc))
            return {}
        out = {}
        for ev in events:
            v = ev.attributes.get("state_root_and_protocol_version", "")
            if ev.attributes.get("escrow_id") and v.startswith("v"):
                out[ev.attributes["escrow_id"]] = v.split(":")[0]
        return out

    def plan(self, epoch: int, info: dict | None) -> tuple[int, list[str], list[str]]:
        """Load the epoch's chain metadata; return (epoch, its escrow ids, the ids still to fetch)."""
        records: list[dict[str, Any]] = []
        try:
            root = self.g.chain.epoch_group_data(epoch)
        except FetchError as exc:
            if exc.transient:
                raise
            root = None
        if info is not None:
            records.append(epoch_record(info))
        elif root:
            group = root.get("epoch_group_data") or {}
            rec = {"kind": "epoch", "epoch_index": epoch}
            if group.get("poc_start_block_height") not in (None, ""):
                rec["start_height"] = parse_u64(group["poc_start_block_height"])
            records.append(rec)
        for model_id in ((root or {}).get("epoch_group_data") or {}).get("sub_group_models") or []:
            try:
                snap = model_snapshot_record(self.g.chain.epoch_group_data(epoch, model_id))
            except FetchError as exc:
                if exc.transient:
                    raise
                continue
            if snap:
                records.append(snap)
        self.store.load(records, f"chain:epoch_group_data/{epoch}")

        created = self.g.rpc.escrows_created(epoch)
        ids = list(dict.fromkeys(ev.attributes["escrow_id"] for ev in created if ev.attributes.get("escrow_id")))
        ids.sort(key=lambda x: int(x) if x.isdigit() else 0)
        final = self.store.cursors("escrow-final:")
        self.summary.escrows_skipped_final += sum(f"escrow-final:{e}" in final for e in ids)
        return epoch, ids, [e for e in ids if f"escrow-final:{e}" not in final]

    def finish(self, epoch: int, ids: list[str], pending: list[str], done: dict[str, EscrowDone]) -> None:
        """Host epoch stats of the epoch's participants, and its finality state."""
        participants: dict[str, None] = {}
        n_final = len(ids) - len(pending)
        stored = self.store.stored_slots([e for e in ids if e not in done])  # final before this cycle
        for escrow_id in ids:
            d = done.get(escrow_id)
            if d is None:
                slots = stored.get(escrow_id, [])
            else:
                n_final += d.final
                slots = d.slots or []
            for addr in slots:
                participants[addr] = None
        stats = self.host_epoch_stats(epoch, list(participants))
        if epoch >= (self.summary.epoch or 0):
            state, digest = "open", None
        else:
            digest = hashlib.sha256(b"\n".join(sorted(dumps_record_bytes(r) for r in stats))).hexdigest()
            stable = self.store.stats_digest(epoch) == digest and bool(stats)
            state = "final" if stable and n_final == len(ids) else "settling"
        self.summary.epoch_states[epoch] = state
        self.store.load_many([([dumps_record_bytes(r) for r in stats], f"chain:devshard_host_epoch_stats/{epoch}")],
                             None, after=lambda c: self.store.set_epoch_state(
                                 c, epoch, state, len(ids), n_final, digest,
                                 reason="complete" if state == "final" else None))

    def host_epoch_stats(self, epoch: int, participants: Sequence[str]) -> list[dict]:
        if epoch >= (self.summary.epoch or 0):
            return []  # stats appear once the epoch's escrows settle

        def one(addr: str) -> dict | None:
            try:
                return host_epoch_stats_record(self.g.chain.host_epoch_stats(epoch, addr))
            except FetchError as exc:
                if exc.transient:
                    raise
                return None

        return [rec for rec in self._pool.map(one, participants) if rec]

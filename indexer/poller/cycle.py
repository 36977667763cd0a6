"""One poll cycle: chain → epochs, model snapshots, escrows → host logs and stats → records → replay → rules.

Epochs are visited oldest first (current − 2, current − 1, current), so escrows about to be pruned
(``DevshardPruningThreshold = 2``) are captured before newer work. Per escrow, the diff log is read from the
``escrow:<id>`` cursor (last ingested nonce) in pages of ≤ 64 nonces; every chunk of pages is committed with its
cursor in one transaction. An escrow whose settled log is complete gets an ``escrow-final:<id>`` cursor and is not
fetched again.
"""
from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

import psycopg

from indexer.poller.store import Store
from indexer.sources.gonka import FetchError, Gonka, HostGroup, RetryPolicy
from indexer.sources.gonka.host import PAGE_NONCES
from indexer.wire.diffs import b64encode
from indexer.wire.normalize import (NormalizeError, current_epoch, epoch_record, escrow_record,
                                    host_epoch_stats_record, host_stats_records, model_snapshot_record,
                                    normalize_diffs, parse_u64)
from indexer.wire.protobuf import WireDecodeError

log = logging.getLogger(__name__)

PRUNING_WINDOW = 2            # DevshardPruningThreshold
PAYLOAD_WORKERS = 4  # concurrent payload requests (hosts are remote; on loopback 1 is fastest)
PAGES_PER_COMMIT = 16         # 1024 nonces per transaction
POLLER_LOCK_KEY = 0x706F6C6C6572  # 'poller'
VALIDATOR = os.environ.get("GONKA_VALIDATOR_ADDRESS", "gonka1indexer")


@dataclass
class PollSummary:
    epoch: int | None = None
    epochs: list[int] = field(default_factory=list)
    escrows: int = 0
    escrows_skipped_final: int = 0
    escrows_pruned: int = 0
    escrows_failed: int = 0
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


class Poller:
    def __init__(self, conn: psycopg.Connection, gonka: Gonka, store: Store, *, validator: str = VALIDATOR,
                 fetch_payloads: bool = True, payload_workers: int = PAYLOAD_WORKERS) -> None:
        self.conn, self.g, self.store = conn, gonka, store
        self.validator, self.fetch_payloads = validator, fetch_payloads
        self.summary = PollSummary()
        self._pool = ThreadPoolExecutor(max_workers=max(1, payload_workers), thread_name_prefix="payloads")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    # -- epochs ---------------------------------------------------------------------------------
    def cycle(self) -> PollSummary:
        info = self.g.chain.epoch_info()
        now = current_epoch(info)
        s = self.summary
        s.epoch = now
        s.epochs = [e for e in range(now - PRUNING_WINDOW, now + 1) if e >= 0]
        settled_versions = self._settled_versions(self._window_start_height(info))
        for epoch in s.epochs:
            self.epoch(epoch, info if epoch == now else None, settled_versions)
        self.store.load([], "poll", {"chain": str(now)})
        return s

    @staticmethod
    def _window_start_height(info: dict) -> int:
        """A height before the window's oldest settlement: current epoch start − (window + 1) epoch lengths."""
        try:
            start = parse_u64((info.get("latest_epoch") or {}).get("poc_start_block_height"), "poc_start")
            length = parse_u64((info.get("params") or {}).get("epoch_length"), "epoch_length")
        except NormalizeError:
            return 0
        return max(0, start - (PRUNING_WINDOW + 1) * length)

    def _settled_versions(self, min_height: int) -> dict[str, str]:
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

    def epoch(self, epoch: int, info: dict | None, settled_versions: dict[str, str]) -> None:
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
        final = self.store.cursors("escrow-final:")
        participants: dict[str, None] = {}
        for escrow_id in sorted(ids, key=lambda x: int(x) if x.isdigit() else 0):
            if f"escrow-final:{escrow_id}" in final:
                self.summary.escrows_skipped_final += 1
                for addr in self._stored_slots(escrow_id):
                    participants[addr] = None
                continue
            try:
                slots = self.escrow(escrow_id, epoch, settled_versions.get(escrow_id))
            except (FetchError, NormalizeError, WireDecodeError) as exc:
                self.summary.escrows_failed += 1
                log.warning("escrow %s: %s", escrow_id, exc)
                self.store.failures.append((f"escrow:{escrow_id}", getattr(exc, "url", ""), str(exc),
                                            getattr(exc, "transient", False)))
                self.store.error(f"escrow:{escrow_id}", str(exc))
                slots = self._stored_slots(escrow_id)
            for addr in slots:
                participants[addr] = None
        self.store.load(self.host_epoch_stats(epoch, list(participants)), f"chain:devshard_host_epoch_stats/{epoch}",
                        {f"epoch:{epoch}": f"escrows={len(ids)}"})

    def _stored_slots(self, escrow_id: str) -> list[str]:
        row = self.conn.execute("SELECT slots FROM rec.escrow WHERE escrow_id = %s", (escrow_id,)).fetchone()
        return list(row[0] or []) if row else []

    def host_epoch_stats(self, epoch: int, participants: Sequence[str]) -> list[dict]:
        if epoch >= (self.summary.epoch or 0):
            return []  # stats appear once the epoch's escrows settle
        records = []
        for addr in participants:
            try:
                rec = host_epoch_stats_record(self.g.chain.host_epoch_stats(epoch, addr))
            except FetchError as exc:
                if exc.transient:
                    raise
                continue
            if rec:
                records.append(rec)
        return records

    # -- escrows --------------------------------------------------------------------------------
    def escrow(self, escrow_id: str, epoch: int, version: str | None) -> list[str]:
        s = self.summary
        data = self.g.chain.escrow(escrow_id)
        if data.get("found") is False:
            s.escrows_pruned += 1
            stored = self._stored_slots(escrow_id)
            if not stored:
                self.store.failures.append((f"escrow:{escrow_id}", f"devshard_escrow/{escrow_id}",
                                            "pruned before capture", False))
            return stored
        s.escrows += 1
        slots = list((data.get("escrow") or {}).get("slots") or [])
        group = HostGroup(escrow_id, version or "", slots, self.g.host,
                          on_skip=lambda a, r, t: self.store.failures.append((f"host:{a}", f"escrow:{escrow_id}", r, t)))
        if not version:
            versions, _ = group.call(lambda h: h.versions())
            if not versions:
                raise FetchError(f"escrow:{escrow_id}", "no host reports a protocol version", transient=True)
            version = versions[0]
            group.version = version
        esc = escrow_record(data, version)
        settled = bool(esc.get("settled"))

        detail = None
        try:
            detail, _ = group.call(lambda h: h.shard_detail(version, escrow_id))
        except FetchError as exc:
            self.store.failures.append((f"escrow:{escrow_id}", exc.url, f"shard detail: {exc}", exc.transient))
            group.bad.clear()  # the log itself may still be served
        tip = parse_u64(detail["nonce"], "nonce") if detail and detail.get("nonce") is not None else None
        stats = host_stats_records(detail) if detail else []

        after = int(self.store.cursor(f"escrow:{escrow_id}") or 0)
        pending: list[dict] = [esc]
        pages = 0
        nonce = after
        complete = False
        while True:
            if tip is not None and nonce >= tip:
                complete = True
                break
            first = nonce + 1
            last = nonce + PAGE_NONCES if tip is None else min(tip, nonce + PAGE_NONCES)
            diffs = group.page(first, last)
            if diffs:
                pending.extend(self._records(escrow_id, version, epoch, diffs, group))
                nonce = diffs[-1]["nonce"]
                s.diffs += len(diffs)
                pages += 1
            if len(diffs) < last - first + 1:  # the end of what the hosts have
                complete = tip is None or nonce >= tip
                break
            if pages % PAGES_PER_COMMIT == 0:
                self._commit(escrow_id, pending, nonce, final=False)
                pending = []
        if complete:
            pending.extend(stats)
        self._commit(escrow_id, pending, nonce, final=complete and settled and bool(stats))
        return slots

    def _records(self, escrow_id: str, version: str, epoch: int, diffs: list[dict], group: HostGroup) -> list[dict]:
        payloads: dict[int, str] = {}
        if self.fetch_payloads:
            wanted = [fin["inference_id"] for d in diffs for tx in d["txs"]
                      if (fin := tx.get("finish_inference")) and fin.get("input_tokens") == 0
                      and fin.get("output_tokens") == 0]
            # payload requests are independent and many: fetch them concurrently (httpx.Client is thread-safe)
            bodies = self._pool.map(lambda iid: self._payload(group, version, escrow_id, iid, epoch), wanted)
            payloads = {iid: body for iid, body in zip(wanted, bodies) if body is not None}
        out = normalize_diffs(escrow_id, diffs, version, payloads)
        self.summary.txs += len(out.records) + sum(out.other.values())
        return out.records

    def _payload(self, group: HostGroup, version: str, escrow_id: str, inference_id: int, epoch: int) -> str | None:
        for address in group.candidates():
            try:
                host = self.g.host(address)
                if host is None:
                    continue
                data = host.payload(version, escrow_id, inference_id, validator=self.validator, epoch=epoch)
            except FetchError as exc:
                if exc.transient:
                    continue
                return None  # 401/403/404: not available to us
            body = data.get("response_payload") if isinstance(data, dict) else None
            if isinstance(body, (bytes, bytearray)):
                body = b64encode(bytes(body))
            return body if isinstance(body, str) else None
        return None

    def _commit(self, escrow_id: str, records: list[dict], nonce: int, *, final: bool) -> None:
        cursors = {f"escrow:{escrow_id}": str(nonce)}
        if final:
            cursors[f"escrow-final:{escrow_id}"] = str(nonce)
        res = self.store.load(records, f"devshard:escrow/{escrow_id}", cursors)
        self.summary.records += res.records
        self.summary.loaded += res.loaded
        self.summary.amended += res.amended


def poll_once(url: str, chain_urls: str | Sequence[str], rpc_url: str | Sequence[str], *,
              policy: RetryPolicy | None = None, process: bool = True, archive: bool = True,
              fetch_payloads: bool = True, payload_workers: int = PAYLOAD_WORKERS) -> PollSummary:
    """One full cycle into the database at ``url``. A cycle that cannot take the poller lock does nothing."""
    from indexer.replay.run import replay_dirty
    from indexer.rules.run import run_rules

    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        if not conn.execute("SELECT pg_try_advisory_lock(%s)", (POLLER_LOCK_KEY,)).fetchone()[0]:
            return PollSummary(locked_out=True)
        try:
            store = Store(conn, archive=archive)
            with Gonka(chain_urls, rpc_url, policy=policy, on_response=store.on_response,
                       on_failure=store.on_failure) as gonka:
                poller = Poller(conn, gonka, store, fetch_payloads=fetch_payloads, payload_workers=payload_workers)
                try:
                    summary = poller.cycle()
                except Exception as exc:
                    store.error("chain", f"{type(exc).__name__}: {exc}")
                    raise
                finally:
                    poller.close()
                    poller.summary.requests = gonka.requests()
                    store.flush()
            if process:
                summary.replayed_escrows = replay_dirty(conn).escrows
                summary.rules_epochs = run_rules(conn).epochs
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (POLLER_LOCK_KEY,))
    summary.seconds = time.perf_counter() - start
    return summary

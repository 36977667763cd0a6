"""The fetch side of the poller: one escrow's metadata, diff log, payloads and host stats, read on a fetch thread
and handed over as :class:`Chunk` s of NDJSON lines with the cursors they move, then an :class:`EscrowDone`.

Nothing here holds a database handle: failures go to ``report_failure`` (the store queues them in memory and writes
them with the next commit), and everything the database must know travels in the chunks. That is the boundary that
lets several escrows be fetched at once while one thread commits (:mod:`indexer.poller.commit`).

Before a member's log is used, every diff of it is checked *signed* (its user signature recovers to the escrow's
creator; :func:`indexer.poller.decode.check_signed`, in the decode processes), as source and as witness; a member
that fails is skipped and the next one read. The *replayed* check (every signed root recomputed) is not made here:
measured on a v4.1 devnet (449 diffs, 1,502 txs, load average 8 on 2 cores), the replay cost 25 ms a diff against
0.7 ms for the signature, and an incremental poll would have to rebuild each session from its stored diffs every
cycle; the verification stage replays each escrow once from the stored ``signed_diff`` rows
(replay.escrow_verification), and the members' cross-check of roots stays for what the signed check cannot decide
here (a history the user signed twice).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Callable

from indexer.load.assemble import PLACEHOLDER_SOURCE
from indexer.load.prepare import prepare_batch
from indexer.poller.awaited import Awaited
from indexer.poller.decode import DecodePool, Decoded, LogRejected, decode_entries
from indexer.poller.payloads import Asked, FailureReport, ask_members
from indexer.poller.settled import Settlement, SettledReads
from indexer.sources.gonka import FetchError, Gonka, HostGroup
from indexer.sources.gonka.chain import PREFIX
from indexer.sources.gonka.host import PAGE_NONCES
from indexer.sources.gonka.settlements import is_final
from indexer.wire.normalize import (NormalizeError, dumps_record_bytes, escrow_record, host_stats_records,
                                    parse_u64)
from indexer.wire.schemas import SCHEMAS, schema_for

PAGES_PER_CHUNK = 16          # 1024 nonces per run of pages (one witness check, one unit of commit)
PAYLOAD_PIPELINE = 32         # payload requests written back to back on one connection (HTTP/1.1 pipelining)


@dataclass
class Chunk:
    """What one fetch thread hands to the committing thread: NDJSON lines of one fetch and the cursors they move.
    Most lines come typed by the decode workers: ``parts`` are (position of a part's first line, its Prepared) and
    ``untyped`` the positions of the rest (indexer.load.assemble)."""
    escrow_id: str
    lines: list[bytes]
    cursors: dict[str, str]
    diffs: int = 0
    txs: int = 0
    parts: list = field(default_factory=list)
    untyped: list[int] = field(default_factory=list)
    awaited: list[Awaited] = field(default_factory=list)  # 0/0 Finishes of these lines stored without their payload


@dataclass
class EscrowDone:
    escrow_id: str
    slots: list[str] | None = None  # None: failed (error set)
    error: Exception | None = None
    after: int = 0                   # cursor before this cycle
    nonce: int | None = None         # cursor after this cycle (None: unchanged)
    tip: int | None = None           # the host's shard nonce (source position), when known
    final: bool = False
    found: bool = False              # the chain still has the escrow
    pruned: bool = False             # the chain answered found:false
    t_fetch: float = 0.0
    t_decode: float = 0.0
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (member, why): logs that failed the signed check




def bound_version(detail: dict, guess: str) -> str:
    """The protocol version an unsettled escrow's session is bound to, from its shard detail: ``protocol_version``
    (newer hosts), else ``version`` ("versiond runtime bind", devshard statsShardDetailResponse). A host runs every
    approved version side by side and a session binds to one of them on its first request, so the newest version
    the host reports (``guess``) is only a guess: diffs decoded with another version's table come out wrong. Only a
    version with a wire table replaces the guess (an older host's "v1" tag, say, is not one)."""
    for key in ("protocol_version", "version"):
        named = detail.get(key)
        if isinstance(named, str) and named in SCHEMAS:
            return named
    return guess


class Cancelled(Exception):
    """The cycle is stopping: a fetch thread abandons its escrow (its committed cursor is where the rerun resumes)."""


class EscrowFetcher(SettledReads):
    def __init__(self, gonka: Gonka, report_failure: FailureReport, *, validator: str, fetch_payloads: bool,
                 payload_pool: Executor | None, decoders: DecodePool | None, payload_concurrency: int = 1) -> None:
        self.g = gonka
        self.report_failure = report_failure
        self.validator, self.fetch_payloads = validator, fetch_payloads
        self.payload_pool = payload_pool  # None: each escrow thread fetches its own payloads in turn
        self.payload_concurrency = max(1, payload_concurrency)  # the pool's threads: an escrow's batches spread on them
        self.decoders = decoders          # None: decode on the fetch thread
        self.stop = threading.Event()

    def fetch(self, escrow_id: str, epoch: int, settlement: Settlement | None, after: int,
              emit: Callable[[Chunk | EscrowDone], None], done: EscrowDone) -> None:
        """Fetch one escrow's metadata, log tail and host stats; hand chunks to ``emit``."""
        data, url = self._escrow(escrow_id, epoch, settlement)
        if data.get("found") is False:
            done.pruned = True  # the committing thread looks up what was stored of it
            return
        done.found = True
        if settlement is None and (data.get("escrow") or {}).get("settled") is True:
            settlement = self._settlement(escrow_id)
        version = settlement.version if settlement else None
        slots = list((data.get("escrow") or {}).get("slots") or [])
        done.slots = slots
        group = HostGroup(escrow_id, version or "", slots, self.g.host,
                          on_skip=lambda a, r, t: self.report_failure(f"host:{a}", f"escrow:{escrow_id}", r, t),
                          full_decode=False)
        try:
            self._escrow_log(escrow_id, epoch, version, after, emit, done, data, url, group, settlement)
        finally:
            done.t_fetch += group.t_fetch
            done.t_decode += group.t_decode


    def _escrow(self, escrow_id: str, epoch: int, settlement: Settlement | None) -> tuple[dict, str]:
        """The chain's ``devshard_escrow/<id>`` from a node that puts it under ``epoch`` (the epoch whose creation
        events listed it) and, when the cycle's settlement search listed its settlement, shows it settled: a node
        answering another epoch, or an escrow not yet settled (a node behind the one that answered the search,
        whose record would take the stored escrow back to unsettled), is recorded as failing and the next node is
        asked; if every node does, the escrow fails this cycle (a transient failure: the next cycle asks again)."""
        http = self.g.chain.http
        why = ""
        for _ in range(len(http.base_urls)):
            data, node = self.g.chain.escrow_from(escrow_id)
            esc = data.get("escrow") if isinstance(data, dict) else None
            url = f"{node}{PREFIX}/devshard_escrow/{escrow_id}"
            if data.get("found") is False or not isinstance(esc, dict):
                return data, url
            said = esc.get("epoch_index")
            if parse_u64(said, "epoch_index") != epoch:
                why = f"epoch_index {said}, but epoch {epoch} listed its creation"
            elif settlement is not None and esc.get("settled") is not True:
                why = (f"not settled at this node, but tx_search lists its settlement at height {settlement.height} "
                       f"(a node behind)")
            else:
                return data, url
            self.report_failure("http", url, f"escrow {escrow_id}: {why}", False)
            http.demote(node)  # the next read starts at another node
        raise FetchError(f"escrow:{escrow_id}", f"every chain node answers escrow {escrow_id} so: {why}",
                         transient=True)

    def _escrow_log(self, escrow_id: str, epoch: int, version: str | None, after: int,
                    emit: Callable[[Chunk | EscrowDone], None], done: EscrowDone, data: dict, url: str,
                    group: HostGroup, settlement: Settlement | None) -> None:
        settled_height = settlement.height if settlement else None
        guessed = not version
        if guessed:
            versions, _ = group.call(lambda h: h.versions())
            if not versions:
                raise FetchError(f"escrow:{escrow_id}", "no host reports a protocol version", transient=True)
            version = versions[0]  # newest first
            group.version = version

        detail = reporter = unread = None
        try:  # observability routes answer from the child the session is bound to, whatever version the URL names
            detail, reporter = group.call(lambda h: h.shard_detail(version, escrow_id))
        except FetchError as exc:
            self.report_failure(f"escrow:{escrow_id}", exc.url, f"shard detail: {exc}", exc.transient)
            group.bad.clear()  # the log itself may still be served
            unread = exc
        if guessed and detail:
            version = group.version = bound_version(detail, version)
        # a version without a wire table is recorded against this escrow and host, never decoded with another table
        schema_for(version, escrow=escrow_id, host=group.primary)
        try:
            esc = escrow_record(data, version)
        except NormalizeError as exc:  # a value past its bound, a malformed field: that node's answer, named
            raise FetchError(url, f"escrow {escrow_id}: {exc}", transient=True) from None
        if settled_height is not None:  # an extra field of the record (rec.escrow.extra): the restitution's SPRT order
            esc["settled_height"] = settled_height
        settled = bool(esc.get("settled"))
        tip = parse_u64(detail["nonce"], "nonce") if detail and detail.get("nonce") is not None else None
        settled_tx = None
        if settled and settlement is not None and settlement.tx_hash:
            # read before the log: the nonce it names ends the settled log, whatever one member's detail says
            settled_tx = self._settlement_tx(escrow_id, settlement)
            if settled_tx is not None:
                reported, tip = tip, self._settled_tip(escrow_id, settled_tx, tip, reporter)
                if reported is not None and tip is not None and reported != tip:
                    # that member's stats describe another state than the settled one: they come from a member
                    # whose detail names the settled nonce, or the escrow stays failing (not final) until one does
                    detail, unread = self._settled_detail(group, version, escrow_id, tip, reporter)
        if settled and tip is not None:
            # the settled session's nonce, which the settlement signs: the chain counts each slot's assigned
            # inferences up to it (devshardAssignedUpperBoundForSlot), an extra field like settled_height
            esc["settle_nonce"] = tip
        stats = host_stats_records(detail) if detail else []
        done.tip = tip
        creator = esc.get("creator")
        if not creator:  # unknown is not false: the log is taken on the members' cross-check alone, and said so
            self.report_failure(f"escrow:{escrow_id}", f"{PREFIX}/devshard_escrow/{escrow_id}", "signed check not "
                                "made: the chain's devshard_escrow names no creator", False)

        pending: list[bytes] = [dumps_record_bytes(esc)]
        parts: list = []
        untyped: list[int] = [0]
        awaited: list[Awaited] = []
        nonce = after
        complete = False
        diffs_n = txs_n = 0
        while True:
            if tip is not None and nonce >= tip:
                complete = True
                break
            first = nonce + 1
            want = PAGE_NONCES * PAGES_PER_CHUNK
            last = nonce + want if tip is None else min(tip, nonce + want)
            runs: list = []  # (diffs as read, their decoded run), of each member page() asked
            try:  # a run checked first (every diff's user signature), then compared with a witness's checked root
                diffs = group.page(first, last, tip, lambda member, read: runs.append(
                    (read, self._checked(escrow_id, version, read, member, done, creator))))
            except FetchError as exc:
                if not done.rejected:
                    raise
                raise FetchError(f"escrow:{escrow_id}", "log rejected: no member serves a log that passes the signed "
                                 f"check from nonce {first} ({'; '.join(f'{a}: {w}' for a, w in done.rejected)}; "
                                 f"then: {exc}): none of it is taken", transient=True) from None
            if diffs:
                decoded = next(dec for read, dec in reversed(runs) if read is diffs)
                lines, ntx, typed, missing = self._records(escrow_id, version, epoch, decoded, group)
                awaited.extend(missing)
                parts.extend((len(pending), part) for part in typed)
                pending.extend(lines)
                nonce = diffs[-1]["nonce"]
                diffs_n += len(diffs)
                txs_n += ntx
            if len(diffs) < last - first + 1:  # the end of what the hosts have
                complete = tip is None or nonce >= tip
                break
            emit(self._chunk(escrow_id, pending, nonce, False, diffs_n, txs_n, done, parts, untyped, awaited))
            pending, diffs_n, txs_n, parts, untyped, awaited = [], 0, 0, [], [], []
        # the host stats with the log's end; the settlement as soon as it is read (the chain's evidence, kept even
        # while the hosts serve less of the log than it settled)
        extra = (stats if complete else []) + ([settled_tx] if settled_tx else [])
        untyped.extend(range(len(pending), len(pending) + len(extra)))
        pending.extend(dumps_record_bytes(r) for r in extra)
        # a settled escrow whose settlement height or transaction is unknown is fetched again (cheaply: its log is
        # complete) until both are known: stored final without the height, it would keep its place out of the SPRT
        # order for good, and without the transaction its settled check could never be made; a transaction read
        # only over REST is stored, and /tx asked again until it answers or no node keeps the block (is_final)
        final = (complete and settled and bool(stats) and settled_height is not None and settled_tx is not None
                 and is_final(settled_tx))
        emit(self._chunk(escrow_id, pending, nonce, final, diffs_n, txs_n, done, parts, untyped, awaited))
        done.nonce, done.final = nonce, final
        if settled and unread is not None:
            # what was read is committed (the chunk above); the escrow is failing all the same until a member gives
            # its final host stats, also when its log was whole already and no page had to be asked
            raise FetchError(f"escrow:{escrow_id}", f"host stats not read: {unread}", transient=unread.transient)

    @staticmethod
    def _chunk(escrow_id: str, lines: list[bytes], nonce: int, final: bool, diffs: int, txs: int,
               done: EscrowDone, parts: list, untyped: list[int], awaited: list[Awaited]) -> Chunk:
        done.nonce = nonce  # committed by the time the watchdog looks (chunks commit before their escrow's end)
        cursors = {f"escrow:{escrow_id}": str(nonce)}
        if final:
            cursors[f"escrow-final:{escrow_id}"] = str(nonce)
        return Chunk(escrow_id, lines, cursors, diffs, txs, parts, untyped, awaited)

    def _checked(self, escrow_id: str, version: str, diffs: list[dict], member: str, done: EscrowDone,
                 creator: str | None) -> Decoded:
        """Diffs ``member`` served, decoded and typed in the process pool and, with ``creator``, checked there as
        signed by it. Diffs that fail raise, and HostGroup.page skips the member (a source: the run is read from the
        next; a witness: its root is not compared) (:class:`LogRejected`: kept in ``done.rejected`` too)."""
        t0 = time.perf_counter()
        try:
            return self._decoding(decode_entries, escrow_id, version, [d["entry"] for d in diffs],
                                  self.fetch_payloads, member, creator or None)
        except LogRejected as exc:
            done.rejected.append((member, str(exc)))
            raise
        finally:
            done.t_decode += time.perf_counter() - t0

    def _records(self, escrow_id: str, version: str, epoch: int, dec: Decoded,
                 group: HostGroup) -> tuple[list[bytes], int, list[Any], list[Awaited]]:
        """NDJSON lines of a decoded run, 0/0 Finish payloads fetched and filled in; with their typed parts
        (numbered from the run's first line) and the Finishes whose payload no member served (awaited)."""
        lines = dec.lines()
        if not dec.held:
            return lines, dec.txs, [dec.typed], []  # type: ignore[return-value]
        # each payload is checked against its Finish's response hash (indexer.poller.payloads)
        wanted = {rec["inference_id"]: rec.get("response_hash") for _, rec in dec.held}
        ids = list(wanted)
        # payload requests are independent and many: batches of them pipelined on one connection each, the
        # batches fetched concurrently (the HTTP client is thread-safe)
        size = max(1, min(PAYLOAD_PIPELINE, -(-len(ids) // self.payload_concurrency)))
        batches = [{i: wanted[i] for i in ids[at:at + size]} for at in range(0, len(ids), size)]
        fetch = lambda batch: self._payloads(group, version, escrow_id, batch, epoch)  # noqa: E731
        done_batches = map(fetch, batches) if self.payload_pool is None else self.payload_pool.map(fetch, batches)
        asked = Asked()
        for batch in done_batches:
            asked.add(batch)
        awaited = []
        for pos, rec in dec.held:
            body = asked.found.get(rec["inference_id"])
            if body is not None:
                rec["response_payload"] = body
            lines[pos] = dumps_record_bytes(rec)
            if not asked.settled(rec["inference_id"]):
                awaited.append(Awaited(escrow_id, int(rec["inference_id"]), epoch, version, lines[pos],
                                       asked.errors.get(rec["inference_id"]) or "no member of the group asked"))
        # refusals are typed (their payloads parsed) by a decode worker too, numbered like the rest of the run
        held = [(pos + 1, lines[pos]) for pos, _ in dec.held]
        typed_held = self._decoding(prepare_batch, PLACEHOLDER_SOURCE, held)
        return lines, dec.txs, [dec.typed, typed_held], awaited  # type: ignore[return-value]

    def _decoding(self, fn, *args):
        """``fn(*args)`` in a decode process, or on this thread without a pool."""
        return fn(*args) if self.decoders is None else self.decoders.run(fn, *args)

    def _payloads(self, group: HostGroup, version: str, escrow_id: str, wanted: dict[int, str | None],
                  epoch: int) -> Asked:
        """The stored payloads of ``wanted`` (inference id → its Finish's response hash), asked of the group's
        members in turn (:func:`indexer.poller.payloads.ask_members`)."""
        return ask_members(self.g, group.candidates(), version, escrow_id, wanted, epoch,
                           validator=self.validator, report=self.report_failure, group=group.members)

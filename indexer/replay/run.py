"""Replay dirty escrows from the database and store the derived state.

Per chunk of escrows, one transaction: claim the dirty marks (SKIP LOCKED, so two workers never replay the same
escrow at once), read the txs (one query per tx table), replay each escrow with `machine.replay_rows`, replace its
derived rows via COPY, and mark its epoch dirty for the rules stage. A late record re-marks its escrow and the
next pass replays it again.
"""
from __future__ import annotations

import logging
import os
import tempfile
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from indexer.db.claims import claim
from indexer.db.deadlocks import retrying_deadlocks
from indexer.db.lockorder import lock_parents
from indexer.db.quickstats import Deferred, analyze_quickly
from indexer.db.marks import EPOCH_MARK
from indexer.load.partitions import analyze_epochs
from indexer.workers import InterruptAtSafePoints, no_cyclic_gc, pool as workers_pool, run_alone, stop_requested
from indexer.replay.machine import EscrowConfig, replay_rows
from indexer.replay.reads import SOURCES, log_parts
from indexer.replay.verification import verify_escrows
from indexer.replay.verifier import mark_stale_verifications

log = logging.getLogger(__name__)

CHUNK_ESCROWS = 50  # escrows claimed by one transaction
# What a chunk holds in memory at once: its escrows are read and replayed in parts of at most this many txs and of
# vote lists of at most this many bytes (an escrow larger than that is a part of its own). An escrow's log grows with
# the load (ten times the txs at 10M lines as at 1M), so a bound in escrows alone let the peak grow with it.
CHUNK_TXS = 20_000
CHUNK_VOTE_BYTES = 16 << 20
REPLAY_WORKERS = 2
ANALYZE_AFTER_ROWS = 10_000
FRUITLESS_POOLS = 3  # broken pools in a row that no escrow could be blamed for: then the pass fails
MAX_HELD = 20  # more escrows than this killing their replay process alone is a broken machine, not bad escrows


class ReplayWorkersLost(RuntimeError):
    """Replay processes keep dying in a way no few escrows explain: the pass stops (what it committed stays)."""

_DERIVED = ("replay.inference", "replay.rejected_tx", "replay.vote", "replay.slot_stats", "replay.escrow")
# The epoch-partitioned parents a chunk reads and writes, locked when its transaction starts, in the one order of
# indexer.db.lockorder: a replay that took rec.start_tx and then waited for rec.confirm_start_tx, while a loader
# making a new epoch's partitions held that one and waited for rec.start_tx, was a deadlock.
_EVIDENCE = ("rec.signed_diff", "rec.settlement")  # read by the verification stage (indexer.replay.verification)
_LOCK_PARENTS = lock_parents([(table, "ACCESS SHARE") for table, _ in SOURCES]
                             + [(table, "ACCESS SHARE") for table in _EVIDENCE]
                             + [("replay.inference", "ROW EXCLUSIVE")])


# The rules re-evaluate each replayed escrow and the epoch-wide findings of its epoch, and of the epoch it left
# when an amendment moved it (``left``, read before the chunk rewrites replay.escrow). An epoch marked whole (an
# epoch-level change) stays whole. The marks are written last in the chunk's transaction, epochs first and in
# order (EPOCH_MARK locks them until the chunk commits), as the rules stage claims epochs before their escrow
# marks: a rules run in another process that starts after them skips these epochs until the replayed rows are
# committed; one that claimed an epoch before them makes the chunk wait for its commit, then the chunk marks the
# epoch anew; and a rules run never deletes an epoch mark while an escrow mark of that epoch is being written.
# Last, not first: the mark of an epoch is one row that every chunk of that epoch locks, so a chunk that took it
# first held it for its whole replay, and concurrent replay processes on escrows of one epoch (the pass after a
# load: two workers on chunks of 50 escrows of an epoch of about a hundred) waited for each other's whole chunk.
# replay.inference is partitioned by epoch (docs/partitioning.md): an escrow's rows are in the partition of the
# epoch its last replay wrote to replay.escrow, so only those partitions are read (pruned when the statement starts)
_DELETE_OLD = {"replay.inference": "DELETE FROM replay.inference WHERE escrow_id = ANY(%(ids)s) AND epoch_index = ANY("
                                   "ARRAY(SELECT epoch_index FROM replay.escrow WHERE escrow_id = ANY(%(ids)s)))"}
_MARK_EPOCHS = f"""
INSERT INTO rules.dirty_epoch (epoch_index, whole)
SELECT epoch_index, false FROM rec.escrow WHERE escrow_id = ANY(%(ids)s) AND epoch_index IS NOT NULL
UNION SELECT unnest(%(left)s::bigint[]), false
ORDER BY 1
ON CONFLICT {EPOCH_MARK}
"""
_MARK_ESCROWS = """
INSERT INTO rules.dirty_escrow (escrow_id, epoch_index)
SELECT escrow_id, epoch_index FROM rec.escrow WHERE escrow_id = ANY(%(ids)s) AND epoch_index IS NOT NULL
ORDER BY 1
ON CONFLICT (escrow_id) DO UPDATE SET epoch_index = excluded.epoch_index
"""


@dataclass
class ReplaySummary:
    escrows: int = 0
    txs: int = 0
    rejected: int = 0
    inferences: int = 0
    verified: int = 0  # escrows whose verification row was (re)computed
    seconds: float = 0.0
    peak_txs: int = 0  # the most txs one part of a chunk held in memory at once (CHUNK_TXS bounds it)
    deferred_analyze: Deferred | None = None  # tables skipped while autovacuum held them (indexer.db.quickstats)
    # escrows whose replay killed its worker process, the last time alone: left dirty, skipped by the rest of the pass
    held: list[str] = field(default_factory=list)

    def add(self, other: "ReplaySummary") -> None:
        self.escrows += other.escrows
        self.txs += other.txs
        self.rejected += other.rejected
        self.inferences += other.inferences
        self.verified += other.verified
        self.peak_txs = max(self.peak_txs, other.peak_txs)
        self.held += other.held


def replay_dirty(conn: psycopg.Connection, *, chunk: int = CHUNK_ESCROWS, progress=None,
                 url: str | None = None, workers: int = 1, prior: ReplaySummary | None = None,
                 txs: int = CHUNK_TXS) -> ReplaySummary:
    """Replay every dirty escrow. With `url` the pass runs in worker processes (up to `workers`, one a chunk), each
    claiming its own chunks with SKIP LOCKED on its own connection: the machine is pure Python, and a process that
    dies then costs its escrow, not this command (:func:`_replay_in_workers`). A pass of one chunk still takes a
    process (~35 ms more: 51 against 17 ms for four small escrows), because the command's own process is the one
    thing nothing can be isolated from. ``prior``: what was replayed already for the same change
    (indexer.replay.follow, during the load): counted in the result and in the decision to refresh statistics; the
    result's seconds are this pass's plus the prior's (the time its end was waited for after the load). A pass in
    worker processes commits the caller's transaction first, so that the dirty marks it holds are theirs to claim."""
    summary, start = ReplaySummary(), time.perf_counter()
    if prior is not None:
        summary.add(prior)
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    mark_stale_verifications(conn)  # rows of a lower verifier version, and crashed ones, are checked again
    dirty = conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone()[0]
    if url is not None and workers > 0 and dirty:
        if not conn.autocommit:  # the workers claim on connections of their own: they must see this one's marks
            conn.commit()        # (``indexer replay --all`` marks every escrow, then replays)
        _replay_in_workers(url, chunk, min(workers, -(-dirty // chunk)), summary)
    else:
        if idle and not conn.autocommit:  # each chunk a transaction of its own, which a deadlock victim's retry
            conn.commit()                 # needs, and the stages after this one start idle
        replay_loop(conn, chunk, summary, progress, txs=txs)
    if summary.inferences >= ANALYZE_AFTER_ROWS:  # the rules stage runs next; give the planner real counts
        summary.deferred_analyze = analyze_quickly(conn, [t for t in _DERIVED if t != "replay.inference"])
        # replay.inference by epoch: the partitions the rules stage is about to read
        summary.deferred_analyze.add(analyze_epochs(
            conn, "replay.inference", [r[0] for r in conn.execute("SELECT epoch_index FROM rules.dirty_epoch")]))
        if not conn.autocommit:
            conn.commit()
    summary.seconds = time.perf_counter() - start + (prior.seconds if prior is not None else 0.0)
    return summary


def replay_loop(conn: psycopg.Connection, chunk: int, summary: ReplaySummary, progress=None,
                hold: list | tuple = (), stop=None, on_claim=None, txs: int = CHUNK_TXS) -> None:
    """Claim, replay and write chunks until none is dirty (but the escrows in ``hold``, read at every claim: the
    caller may change the list between chunks), or until ``stop()`` says so between chunks; each chunk is one
    transaction. ``on_claim(ids)`` is told each chunk's escrows before they are replayed; ``txs`` bounds the txs a
    chunk holds in memory at once."""
    while replay_chunk(conn, chunk, summary, hold, on_claim=on_claim, txs=txs):
        if progress:
            progress(summary)
        if stop is not None and stop():
            return


def replay_chunk(conn: psycopg.Connection, chunk: int, summary: ReplaySummary, hold: list | tuple = (), *,
                 only: list | tuple | None = None, on_claim=None, txs: int = CHUNK_TXS) -> bool:
    """Claim up to ``chunk`` dirty escrows (not those in ``hold``; with ``only``, only those), replay them, write
    their rows and verify their logs (indexer.replay.verification), in one transaction, holding at most ``txs`` txs
    (and their signed diffs) in memory at once (:func:`parts`). False when none was dirty. A chunk the server
    cancels as a deadlock victim is rolled back whole, its claims with it, and claimed again (indexer.db.deadlocks;
    counted in ``summary`` once, when it commits)."""
    def attempt() -> tuple[bool, ReplaySummary]:
        part = ReplaySummary()
        return _chunk_once(conn, chunk, part, hold, only, on_claim, txs), part

    claimed, part = retrying_deadlocks(conn, attempt, "replay chunk")
    summary.add(part)
    return claimed


def _chunk_once(conn: psycopg.Connection, chunk: int, summary: ReplaySummary, hold, only, on_claim,
                txs: int) -> bool:
    with conn.transaction(), no_cyclic_gc():
        conn.execute(_LOCK_PARENTS)
        ids = claim(conn, "replay.dirty_escrow", "escrow_id", chunk, hold, only)
        if not ids:
            return False
        if on_claim is not None:
            on_claim(ids)
        left = _clear_chunk(conn, ids)
        for part, results in replay_parts(conn, ids, txs, CHUNK_VOTE_BYTES):
            _write(conn, results)
            _count(results, summary)
            summary.verified += len(verify_escrows(conn, part))
        _mark_chunk(conn, ids, left)
        summary.escrows += len(ids)
    return True


def _replay_in_workers(url: str, chunk: int, workers: int, summary: ReplaySummary) -> None:
    """The pass in worker processes, each claiming its own chunks. A worker that dies (killed, out of memory, a crash
    in native code) breaks the pool for good; ending the pass there would end the rules stage after it too, and an
    escrow whose replay kills its process would then stop every later pass the same way. Each worker writes the
    escrows of the chunk in its hands to a file before replaying them, so after a death those chunks (rolled back,
    still dirty) are replayed again, each part in a process of its own and halved while its process dies, down to
    the escrow that kills a process alone: that one stays dirty and is held out of the rest of the pass (``held``),
    and a new pool goes on with the others. Ctrl-C asks the workers to stop after their chunk (each is one
    transaction): what they replayed stays."""
    fruitless = 0
    with tempfile.TemporaryDirectory(prefix="indexer-replay-") as hands:
        while not _pool_pass(url, chunk, workers, hands, summary):
            in_hand = _take_hands(Path(hands))
            log.warning("a replay process died: the %d escrows of the chunks in hand are replayed again, in "
                        "processes of their own", len(in_hand))
            killers = _isolate(url, in_hand, summary)
            for escrow_id in killers:
                log.error("escrow %s kills its replay process (twice, the second time alone): left dirty, "
                          "held out of this pass", escrow_id)
            summary.held += killers
            if len(summary.held) > MAX_HELD:
                raise ReplayWorkersLost(f"{len(summary.held)} escrows kill their replay process even alone "
                                        f"({', '.join(summary.held[:5])}, …): a broken machine, not bad escrows; "
                                        "the pass stops, what it committed stays")
            fruitless = 0 if killers else fruitless + 1
            if fruitless >= FRUITLESS_POOLS:
                raise ReplayWorkersLost(f"replay processes died {fruitless} times in a row and no escrow killed "
                                        "one alone: the pass stops, what it committed stays")


def _pool_pass(url: str, chunk: int, workers: int, hands: str, summary: ReplaySummary) -> bool:
    """One pool's go at the dirty escrows, but those in ``summary.held``; False when a worker died and broke it."""
    try:
        with workers_pool(workers) as pool, InterruptAtSafePoints(on_request=pool.request_stop):
            hold = tuple(summary.held)
            for part in pool.map(_replay_worker, [url] * workers, [chunk] * workers, [hands] * workers,
                                 [hold] * workers):
                summary.add(part)
        return True
    except BrokenProcessPool:
        return False


def _take_hands(hands: Path) -> list[str]:
    """The escrows the workers' hands files name (the chunks they held when the pool broke), the files removed."""
    in_hand: set[str] = set()
    for hand in hands.iterdir():
        in_hand.update(hand.read_text().split())
        hand.unlink()
    return sorted(in_hand)


def _isolate(url: str, ids: list[str], summary: ReplaySummary) -> list[str]:
    """Replay ``ids`` (those still dirty) in a process of its own; if it dies, each half the same way. Returns the
    escrows that killed a process alone."""
    if not ids:
        return []
    try:
        summary.add(run_alone(_replay_only, url, ids))
        return []
    except BrokenProcessPool:
        if len(ids) == 1:
            return list(ids)
        half = len(ids) // 2
        return _isolate(url, ids[:half], summary) + _isolate(url, ids[half:], summary)


def _replay_worker(url: str, chunk: int, hands: str, hold: tuple) -> "ReplaySummary":
    summary = ReplaySummary()
    hand = Path(hands) / str(os.getpid())
    with psycopg.connect(url) as conn:
        replay_loop(conn, chunk, summary, hold=hold, stop=stop_requested,
                    on_claim=lambda ids: hand.write_text("\n".join(ids)))
    hand.unlink(missing_ok=True)
    return summary


def _replay_only(url: str, ids: list[str]) -> "ReplaySummary":
    """Replay the escrows of ``ids`` that are still dirty, in one chunk. Their marks are waited for, not skipped:
    a mark may still be locked by the dead worker's transaction until the server has seen its connection close."""
    summary = ReplaySummary()
    with psycopg.connect(url) as conn:
        replay_chunk(conn, len(ids), summary, only=ids)
    return summary


def mark_all_dirty(conn: psycopg.Connection) -> None:
    conn.execute("INSERT INTO replay.dirty_escrow (escrow_id) SELECT escrow_id FROM rec.escrow ON CONFLICT DO NOTHING")


def _load_configs(conn, ids: list[str]) -> dict[str, tuple[EscrowConfig, int | None]]:
    rows = conn.execute("SELECT escrow_id, slots, vote_threshold_factor, coalesce(settled, false), epoch_index "
                        "FROM rec.escrow WHERE escrow_id = ANY(%s) AND slots IS NOT NULL ORDER BY escrow_id", (ids,))
    return {eid: (EscrowConfig(eid, tuple(slots), factor, settled), epoch)
            for eid, slots, factor, settled, epoch in rows}


def replay_parts(conn: psycopg.Connection, ids: list[str], txs: int, vote_bytes: int):
    """(part, [(config, epoch, replay result, txs)]) for each part of ``ids`` (reads.log_parts), replayed in turn;
    an escrow without an escrow record is in its part but has no result. Caller's transaction."""
    configs = _load_configs(conn, ids)
    epochs = sorted({epoch for _, epoch in configs.values() if epoch is not None})
    for part, logs in log_parts(conn, ids, list(configs), epochs, txs, vote_bytes):
        yield part, _replay_part(configs, part, logs)


def _replay_part(configs: dict, part: list[str], logs: dict[str, list[tuple]]) -> list:
    results = []
    for escrow_id in part:
        if escrow_id not in configs:  # no escrow record yet: nothing to replay it with
            continue
        config, epoch = configs[escrow_id]
        rows = logs.get(escrow_id, [])  # an escrow without txs still replays: every slot has 0 missed / 0 invalid
        results.append((config, epoch, replay_rows(config, rows, transitions=False), len(rows)))
    return results


def _clear_chunk(conn: psycopg.Connection, ids: list[str]) -> list[int]:
    """Delete the chunk's derived rows (caller's transaction), before any part of the chunk is written; return the
    epochs their last replay put them in (replay.escrow, about to be rewritten), for :func:`_mark_chunk`."""
    left = [r[0] for r in conn.execute("SELECT DISTINCT epoch_index FROM replay.escrow WHERE escrow_id = ANY(%s) "
                                       "AND epoch_index IS NOT NULL", (ids,))]
    for table in _DERIVED:
        conn.execute(_DELETE_OLD.get(table, f"DELETE FROM {table} WHERE escrow_id = ANY(%(ids)s)"), {"ids": ids})
    return left


def _mark_chunk(conn: psycopg.Connection, ids: list[str], left: list[int]) -> None:
    """Mark the chunk's escrows and their epochs, now and before (``left``), for the rules stage, as the last writes
    of the chunk's transaction (_MARK_EPOCHS says why last)."""
    conn.execute(_MARK_EPOCHS, {"ids": ids, "left": left})
    conn.execute(_MARK_ESCROWS, {"ids": ids})


def _count(results, summary: ReplaySummary) -> None:
    held = 0
    for _, _, result, n in results:
        held += n
        summary.rejected += len(result.rejections)
        summary.inferences += len(result.inferences)
    summary.txs += held
    summary.peak_txs = max(summary.peak_txs, held)


def _write(conn: psycopg.Connection, results) -> None:
    with conn.cursor() as cur:
        _copy(cur, "replay.inference", "escrow_id:text inference_id:int8 epoch_index:int8 executor_slot:int4 "
              "executor_address:text status:text votes_valid:int4 votes_invalid:int4 vote_threshold:int4 penalty:text "
              "status_nonce:int8 challenged_nonce:int8 challenger_slot:int4 resolved_nonce:int8 timeout_reason:text "
              "start_nonce:int8 started_nonce:int8 finished_nonce:int8 timed_out_nonce:int8 drained:bool",
              ((config.escrow_id, s.inference_id, epoch, s.executor_slot, s.executor_address, s.status,
                s.votes_valid, s.votes_invalid, res.vote_threshold, s.penalty, s.status_nonce, s.challenged_nonce,
                s.challenger_slot, s.resolved_nonce, s.timeout_reason, s.entered.get("Pending"),
                s.entered.get("Started"), s.entered.get("Finished"), s.entered.get("TimedOut"), s.drained)
               for config, epoch, res, _ in results for s in res.inferences.values()))
        _copy(cur, "replay.rejected_tx", "escrow_id:text ordinal:int4 diff_nonce:int8 kind:text inference_id:int8 "
              "slot:int4 reason:text ignored:bool",
              ((config.escrow_id, ordinal, r.diff_nonce, r.kind, r.inference_id, r.slot, r.reason, ignored)
               for config, _, res, _ in results
               for ordinal, (r, ignored) in enumerate([(r, False) for r in res.rejections]
                                                      + [(r, True) for r in res.ignored])))
        _copy(cur, "replay.vote", "escrow_id:text inference_id:int8 ordinal:int4 diff_nonce:int8 kind:text slot:int4 "
              "address:text weight:int4 valid:bool effect:text",
              ((config.escrow_id, v.inference_id, ordinal, v.diff_nonce, v.kind, v.slot, v.address, v.weight,
                v.valid, v.effect)
               for config, _, res, _ in results for ordinal, v in enumerate(res.votes)))
        _copy(cur, "replay.slot_stats", "escrow_id:text slot_id:int4 participant:text missed:int8 invalid:int8",
              ((config.escrow_id, slot_id, address, res.slot_missed.get(slot_id, 0), res.slot_invalid.get(slot_id, 0))
               for config, _, res, _ in results for slot_id, address in enumerate(config.slots)))
        _copy(cur, "replay.escrow", "escrow_id:text epoch_index:int8 group_size:int4 vote_threshold:int4 "
              "tx_count:int8 rejected_count:int8",
              ((config.escrow_id, epoch, len(config.slots), res.vote_threshold, n, len(res.rejections))
               for config, epoch, res, n in results))


def _copy(cur: psycopg.Cursor, table: str, columns: str, rows) -> None:
    """COPY rows in; `columns` is 'name:type ...'. Binary, so psycopg dumps the values in C: about half the
    Python cost of a text COPY (measured), for the same server cost."""
    names, types = zip(*(c.split(":") for c in columns.split()))
    with cur.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)") as cp:
        cp.set_types(list(types))
        for row in rows:
            cp.write_row(row)

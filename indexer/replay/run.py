"""Replay dirty escrows from the database and store the derived state.

Per chunk of escrows, one transaction: claim the dirty marks (SKIP LOCKED, so two workers never replay the same
escrow at once), stream the txs, replay each escrow with `machine.replay`, replace its derived rows via COPY, and
mark its epoch dirty for the rules stage. A late record re-marks its escrow and the next pass replays it again.
"""
from __future__ import annotations

import itertools
import operator
import queue
import threading
import time
from dataclasses import dataclass

import psycopg

from indexer.db.claims import claim
from indexer.workers import pool as workers_pool
from indexer.replay.machine import EscrowConfig, Tx, replay

CHUNK_ESCROWS = 50  # bounds a worker's memory: one chunk's txs and results are held at once
REPLAY_WORKERS = 2
ANALYZE_AFTER_ROWS = 10_000

_TXS = """
SELECT escrow_id, diff_nonce, kind_order, inference_id, slot, kind, valid, reason, votes, input_tokens, output_tokens
FROM (
  SELECT escrow_id, diff_nonce, 0 AS kind_order, 'start' AS kind, inference_id, NULL::int AS slot, NULL::bool AS valid,
         NULL::text AS reason, NULL::jsonb AS votes, NULL::bigint AS input_tokens, NULL::bigint AS output_tokens
    FROM rec.start_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 1, 'confirm_start', inference_id, NULL, NULL, NULL, NULL, NULL, NULL
    FROM rec.confirm_start_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 2, 'finish', inference_id, executor_slot, NULL, NULL, NULL, input_tokens,
         output_tokens FROM rec.finish_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 3, 'validation', inference_id, validator_slot, valid, NULL, NULL, NULL, NULL
    FROM rec.validation_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 4, 'validation_vote', inference_id, voter_slot, vote_valid, NULL, NULL,
         NULL, NULL FROM rec.validation_vote_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 5, 'timeout', inference_id, NULL, NULL, reason, votes, NULL, NULL
    FROM rec.timeout_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 6, 'error_miss', inference_id, NULL, NULL, NULL, votes, NULL, NULL
    FROM rec.error_miss_tx WHERE escrow_id = ANY(%(ids)s)
) t ORDER BY escrow_id
"""

_TX_TYPES = ["text", "int8", "int4", "int8", "int4", "text", "bool", "text", "jsonb", "int8", "int8"]
# Protocol order inside an escrow: (diff_nonce, kind order, inference_id, slot). The tables' keys make it total,
# and slot is compared only between validations (or votes) of one inference in one diff, never None.
_PROTOCOL_ORDER = operator.itemgetter(1, 2, 3, 4)
_DERIVED = ("replay.inference", "replay.rejected_tx", "replay.vote", "replay.slot_stats", "replay.escrow")


@dataclass
class ReplaySummary:
    escrows: int = 0
    txs: int = 0
    rejected: int = 0
    inferences: int = 0
    seconds: float = 0.0

    def add(self, other: "ReplaySummary") -> None:
        self.escrows += other.escrows
        self.txs += other.txs
        self.rejected += other.rejected
        self.inferences += other.inferences


def replay_dirty(conn: psycopg.Connection, *, chunk: int = CHUNK_ESCROWS, progress=None,
                 url: str | None = None, workers: int = 1) -> ReplaySummary:
    """Replay every dirty escrow. The machine is pure Python, so with `url` and workers > 1 the chunks are
    spread over worker processes, each claiming its own with SKIP LOCKED on its own connection."""
    summary, start = ReplaySummary(), time.perf_counter()
    dirty = conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone()[0]
    if url is not None and workers > 1 and dirty > chunk:  # worker start-up only pays off beyond one chunk
        with workers_pool(workers) as pool:
            for part in pool.map(_replay_worker, [url] * workers, [chunk] * workers):
                summary.add(part)
    else:
        _replay_loop(conn, chunk, summary, progress)
    if summary.inferences >= ANALYZE_AFTER_ROWS:  # the rules stage runs next; give the planner real counts
        for table in _DERIVED:
            conn.execute(f"ANALYZE {table}")
        if not conn.autocommit:
            conn.commit()
    summary.seconds = time.perf_counter() - start
    return summary


def _replay_loop(conn: psycopg.Connection, chunk: int, summary: ReplaySummary, progress=None) -> None:
    """Claim, replay and write chunks until none is dirty; each chunk is one transaction."""
    while True:
        with conn.transaction():
            ids = claim(conn, "replay.dirty_escrow", "escrow_id", chunk)
            if not ids:
                return
            _write_chunk(conn, ids, _replay_chunk(conn, ids), summary)
        if progress:
            progress(summary)


def _replay_worker(url: str, chunk: int) -> "ReplaySummary":
    summary = ReplaySummary()
    with psycopg.connect(url) as conn:
        _replay_loop(conn, chunk, summary)
    return summary


def mark_all_dirty(conn: psycopg.Connection) -> None:
    conn.execute("INSERT INTO replay.dirty_escrow (escrow_id) SELECT escrow_id FROM rec.escrow ON CONFLICT DO NOTHING")


def _load_configs(conn, ids: list[str]) -> dict[str, tuple[EscrowConfig, int | None]]:
    rows = conn.execute("SELECT escrow_id, slots, vote_threshold_factor, coalesce(settled, false), epoch_index "
                        "FROM rec.escrow WHERE escrow_id = ANY(%s) AND slots IS NOT NULL", (ids,))
    return {eid: (EscrowConfig(eid, tuple(slots), factor, settled), epoch)
            for eid, slots, factor, settled, epoch in rows}


def _replay_chunk(conn: psycopg.Connection, ids: list[str]) -> list:
    configs = _load_configs(conn, ids)
    return [(config, epoch, replay(config, txs, presorted=True, transitions=False), len(txs))
            for config, epoch, txs in _escrow_logs(conn, configs)]


def _write_chunk(conn: psycopg.Connection, ids: list[str], results, summary: ReplaySummary) -> None:
    """Replace the chunk's derived rows and mark its epochs for the rules stage (caller's transaction)."""
    for table in _DERIVED:
        conn.execute(f"DELETE FROM {table} WHERE escrow_id = ANY(%s)", (ids,))
    _write(conn, results)
    conn.execute("INSERT INTO rules.dirty_epoch (epoch_index) SELECT DISTINCT epoch_index FROM rec.escrow "
                 "WHERE escrow_id = ANY(%s) AND epoch_index IS NOT NULL ON CONFLICT DO NOTHING", (ids,))
    summary.escrows += len(ids)
    for _, _, result, n in results:
        summary.txs += n
        summary.rejected += len(result.rejections)
        summary.inferences += len(result.inferences)


def _escrow_logs(conn: psycopg.Connection, configs: dict):
    """Yield (config, epoch, txs) per escrow, in protocol order. A reader thread decodes the binary COPY
    (the GIL is released while it waits on the server) while the caller replays the previous escrow."""
    logs: queue.Queue = queue.Queue(maxsize=4)

    def read() -> None:
        try:
            with conn.cursor() as cur, cur.copy(f"COPY ({_TXS}) TO STDOUT (FORMAT BINARY)",
                                                {"ids": list(configs)}) as cp:
                cp.set_types(_TX_TYPES)
                for escrow_id, rows in itertools.groupby(cp.rows(), key=lambda r: r[0]):
                    logs.put((escrow_id, [_tx(r) for r in sorted(rows, key=_PROTOCOL_ORDER)]))
            logs.put(None)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            logs.put(exc)

    reader = threading.Thread(target=read, name="replay-read", daemon=True)
    reader.start()
    quiet = set(configs)
    while (item := logs.get()) is not None:
        if isinstance(item, BaseException):
            reader.join()
            raise item
        escrow_id, txs = item
        config, epoch = configs[escrow_id]
        quiet.discard(escrow_id)
        yield config, epoch, txs
    reader.join()
    for escrow_id in sorted(quiet):  # an escrow without txs still replays: every slot has 0 missed / 0 invalid
        config, epoch = configs[escrow_id]
        yield config, epoch, []


def _tx(r) -> Tx:
    _, nonce, _, inference_id, slot, kind, valid, reason, votes, input_tokens, output_tokens = r
    return Tx(nonce, kind, inference_id, slot, valid, reason,
              tuple((v["voter_slot"], v["accept"]) for v in votes) if votes else (), input_tokens, output_tokens)


def _write(conn: psycopg.Connection, results) -> None:
    with conn.cursor() as cur:
        with cur.copy("COPY replay.inference (escrow_id, inference_id, epoch_index, executor_slot, executor_address,"
                      " status, votes_valid, votes_invalid, vote_threshold, penalty, status_nonce, challenged_nonce,"
                      " challenger_slot, resolved_nonce, timeout_reason, start_nonce, started_nonce, finished_nonce,"
                      " timed_out_nonce, drained) FROM STDIN") as cp:
            for config, epoch, res, _ in results:
                for s in res.inferences.values():
                    e = s.entered
                    cp.write_row((config.escrow_id, s.inference_id, epoch, s.executor_slot, s.executor_address,
                                  s.status, s.votes_valid, s.votes_invalid, res.vote_threshold, s.penalty,
                                  s.status_nonce, s.challenged_nonce, s.challenger_slot, s.resolved_nonce,
                                  s.timeout_reason, e.get("Pending"), e.get("Started"), e.get("Finished"),
                                  e.get("TimedOut"), s.drained))
        with cur.copy("COPY replay.rejected_tx (escrow_id, ordinal, diff_nonce, kind, inference_id, slot, reason,"
                      " ignored) FROM STDIN") as cp:
            for config, _, res, _ in results:
                tagged = [(r, False) for r in res.rejections] + [(r, True) for r in res.ignored]
                for ordinal, (r, ignored) in enumerate(tagged):
                    cp.write_row((config.escrow_id, ordinal, r.diff_nonce, r.kind, r.inference_id, r.slot, r.reason,
                                  ignored))
        with cur.copy("COPY replay.vote (escrow_id, inference_id, ordinal, diff_nonce, kind, slot, address, weight,"
                      " valid, effect) FROM STDIN") as cp:
            for config, _, res, _ in results:
                for ordinal, v in enumerate(res.votes):
                    cp.write_row((config.escrow_id, v.inference_id, ordinal, v.diff_nonce, v.kind, v.slot, v.address,
                                  v.weight, v.valid, v.effect))
        with cur.copy("COPY replay.slot_stats (escrow_id, slot_id, participant, missed, invalid) FROM STDIN") as cp:
            for config, _, res, _ in results:
                for slot_id, address in enumerate(config.slots):
                    cp.write_row((config.escrow_id, slot_id, address, res.slot_missed.get(slot_id, 0),
                                  res.slot_invalid.get(slot_id, 0)))
        with cur.copy("COPY replay.escrow (escrow_id, epoch_index, group_size, vote_threshold, tx_count,"
                      " rejected_count) FROM STDIN") as cp:
            for config, epoch, res, n in results:
                cp.write_row((config.escrow_id, epoch, len(config.slots), res.vote_threshold, n,
                              len(res.rejections)))

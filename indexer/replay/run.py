"""Replay dirty escrows from the database and store the derived state.

Per chunk of escrows, one transaction: claim the dirty marks (SKIP LOCKED, so two workers never replay the same
escrow at once), stream the txs, replay each escrow with `machine.replay`, replace its derived rows via COPY, and
mark its epoch dirty for the rules stage. A late record re-marks its escrow and the next pass replays it again.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import psycopg

from indexer.replay.machine import EscrowConfig, ReplayResult, Tx, replay

CHUNK_ESCROWS = 200

_TXS = """
SELECT escrow_id, diff_nonce, kind, inference_id, slot, valid, reason, votes, input_tokens, output_tokens FROM (
  SELECT escrow_id, diff_nonce, 'start' AS kind, inference_id, NULL::int AS slot, NULL::bool AS valid,
         NULL::text AS reason, NULL::jsonb AS votes, NULL::bigint AS input_tokens, NULL::bigint AS output_tokens
    FROM rec.start_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 'confirm_start', inference_id, NULL, NULL, NULL, NULL, NULL, NULL
    FROM rec.confirm_start_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 'finish', inference_id, executor_slot, NULL, NULL, NULL, input_tokens,
         output_tokens FROM rec.finish_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 'validation', inference_id, validator_slot, valid, NULL, NULL, NULL, NULL
    FROM rec.validation_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 'validation_vote', inference_id, voter_slot, vote_valid, NULL, NULL,
         NULL, NULL FROM rec.validation_vote_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 'timeout', inference_id, NULL, NULL, reason, votes, NULL, NULL
    FROM rec.timeout_tx WHERE escrow_id = ANY(%(ids)s)
  UNION ALL SELECT escrow_id, diff_nonce, 'error_miss', inference_id, NULL, NULL, NULL, votes, NULL, NULL
    FROM rec.error_miss_tx WHERE escrow_id = ANY(%(ids)s)
) t ORDER BY escrow_id
"""

_DERIVED = ("replay.inference", "replay.rejected_tx", "replay.transition", "replay.slot_stats", "replay.escrow")


@dataclass
class ReplaySummary:
    escrows: int = 0
    txs: int = 0
    rejected: int = 0
    inferences: int = 0
    seconds: float = 0.0


def replay_dirty(conn: psycopg.Connection, *, chunk: int = CHUNK_ESCROWS, progress=None) -> ReplaySummary:
    summary, start = ReplaySummary(), time.perf_counter()
    while True:
        with conn.transaction():
            ids = [r[0] for r in conn.execute(
                """DELETE FROM replay.dirty_escrow WHERE escrow_id IN (
                     SELECT escrow_id FROM replay.dirty_escrow ORDER BY escrow_id LIMIT %s FOR UPDATE SKIP LOCKED)
                   RETURNING escrow_id""", (chunk,))]
            if not ids:
                break
            _replay_chunk(conn, ids, summary)
        if progress:
            progress(summary)
    summary.seconds = time.perf_counter() - start
    return summary


def mark_all_dirty(conn: psycopg.Connection) -> None:
    conn.execute("INSERT INTO replay.dirty_escrow (escrow_id) SELECT escrow_id FROM rec.escrow ON CONFLICT DO NOTHING")


def _load_configs(conn, ids: list[str]) -> dict[str, tuple[EscrowConfig, int | None]]:
    rows = conn.execute("SELECT escrow_id, slots, vote_threshold_factor, coalesce(settled, false), epoch_index "
                        "FROM rec.escrow WHERE escrow_id = ANY(%s) AND slots IS NOT NULL", (ids,))
    return {eid: (EscrowConfig(eid, tuple(slots), factor, settled), epoch)
            for eid, slots, factor, settled, epoch in rows}


def _replay_chunk(conn: psycopg.Connection, ids: list[str], summary: ReplaySummary) -> None:
    configs = _load_configs(conn, ids)
    for table in _DERIVED:
        conn.execute(f"DELETE FROM {table} WHERE escrow_id = ANY(%s)", (ids,))
    results: list[tuple[EscrowConfig, int | None, ReplayResult, int]] = []
    with conn.cursor(name="replay_txs") as cur:
        cur.itersize = 20_000
        cur.execute(_TXS, {"ids": list(configs)})
        for escrow_id, rows in itertools.groupby(cur, key=lambda r: r[0]):
            config, epoch = configs[escrow_id]
            txs = [_tx(r) for r in rows]
            results.append((config, epoch, replay(config, txs), len(txs)))
    _write(conn, results)
    conn.execute("INSERT INTO rules.dirty_epoch (epoch_index) SELECT DISTINCT epoch_index FROM rec.escrow "
                 "WHERE escrow_id = ANY(%s) AND epoch_index IS NOT NULL ON CONFLICT DO NOTHING", (ids,))
    summary.escrows += len(ids)
    for _, _, result, n in results:
        summary.txs += n
        summary.rejected += len(result.rejections)
        summary.inferences += len(result.inferences)


def _tx(r) -> Tx:
    _, nonce, kind, inference_id, slot, valid, reason, votes, input_tokens, output_tokens = r
    return Tx(nonce, kind, inference_id, slot, valid, reason,
              tuple((v["voter_slot"], v["accept"]) for v in votes) if votes else (), input_tokens, output_tokens)


def _write(conn: psycopg.Connection, results) -> None:
    with conn.cursor() as cur:
        with cur.copy("COPY replay.inference (escrow_id, inference_id, epoch_index, executor_slot, executor_address,"
                      " status, votes_valid, votes_invalid, vote_threshold, penalty, status_nonce, challenged_nonce,"
                      " challenger_slot, resolved_nonce, timeout_reason) FROM STDIN") as cp:
            for config, epoch, res, _ in results:
                for s in res.inferences.values():
                    cp.write_row((config.escrow_id, s.inference_id, epoch, s.executor_slot, s.executor_address,
                                  s.status, s.votes_valid, s.votes_invalid, res.vote_threshold, s.penalty,
                                  s.status_nonce, s.challenged_nonce, s.challenger_slot, s.resolved_nonce,
                                  s.timeout_reason))
        with cur.copy("COPY replay.rejected_tx (escrow_id, ordinal, diff_nonce, kind, inference_id, slot, reason,"
                      " ignored) FROM STDIN") as cp:
            for config, _, res, _ in results:
                tagged = [(r, False) for r in res.rejections] + [(r, True) for r in res.ignored]
                for ordinal, (r, ignored) in enumerate(tagged):
                    cp.write_row((config.escrow_id, ordinal, r.diff_nonce, r.kind, r.inference_id, r.slot, r.reason,
                                  ignored))
        with cur.copy("COPY replay.transition (escrow_id, inference_id, ordinal, diff_nonce, from_status, to_status,"
                      " cause) FROM STDIN") as cp:
            for config, _, res, _ in results:
                for ordinal, t in enumerate(res.transitions):
                    cp.write_row((config.escrow_id, t.inference_id, ordinal, t.diff_nonce, t.from_status,
                                  t.to_status, t.cause))
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

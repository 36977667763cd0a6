"""Reading escrow logs from the tx tables for the replay: each escrow's txs as rows in protocol order, and the
size of each escrow's log, so that a chunk of escrows is read and replayed in parts of bounded size."""
from __future__ import annotations

import itertools

import psycopg

from indexer.replay.machine import KIND_ORDER

# Where each tx kind's rows come from: its table, then the row fields in `replay_rows` order (diff_nonce, kind
# code, inference_id, slot, valid, reason, votes, input_tokens, output_tokens) as column names or constants.
# Fields after the last one a kind reads are left out.
SOURCES = (
    ("rec.start_tx", ("diff_nonce", KIND_ORDER["start"], "inference_id", None)),
    ("rec.confirm_start_tx", ("diff_nonce", KIND_ORDER["confirm_start"], "inference_id", None)),
    ("rec.finish_tx", ("diff_nonce", KIND_ORDER["finish"], "inference_id", "executor_slot", None, None, (),
                       "input_tokens", "output_tokens")),
    ("rec.validation_tx", ("diff_nonce", KIND_ORDER["validation"], "inference_id", "validator_slot", "valid")),
    ("rec.validation_vote_tx", ("diff_nonce", KIND_ORDER["validation_vote"], "inference_id", "voter_slot",
                                "vote_valid")),
    ("rec.timeout_tx", ("diff_nonce", KIND_ORDER["timeout"], "inference_id", None, None, "reason", "votes")),
    ("rec.error_miss_tx", ("diff_nonce", KIND_ORDER["error_miss"], "inference_id", None, None, None, "votes")),
)


def escrow_sizes(conn: psycopg.Connection, ids: list[str]) -> list[tuple[str, int, int]]:
    """(escrow_id, txs, bytes of votes) of each of ``ids``, in their order: counted from the tx tables' primary keys
    in the escrows' epoch partitions, so that a chunk can be read in parts before any of its txs is held."""
    epochs = [r[0] for r in conn.execute("SELECT DISTINCT epoch_index FROM rec.escrow WHERE escrow_id = ANY(%s) "
                                         "AND epoch_index IS NOT NULL", (ids,))]
    counted = {escrow_id: (n, b) for escrow_id, n, b in conn.execute(_SIZES, {"ids": ids, "epochs": epochs})}
    return [(escrow_id, *counted.get(escrow_id, (0, 0))) for escrow_id in ids]


_SIZES = "SELECT escrow_id, sum(n)::int8, sum(b)::int8 FROM (" + " UNION ALL ".join(
    f"SELECT escrow_id, count(*) AS n, {'sum(pg_column_size(votes))' if 'votes' in fields else '0'} AS b "
    f"FROM {table} WHERE escrow_id = ANY(%(ids)s) AND epoch_index = ANY(%(epochs)s) GROUP BY escrow_id"
    for table, fields in SOURCES) + ") AS t GROUP BY escrow_id"


def parts(sizes: list[tuple[str, int, int]], txs: int, vote_bytes: int) -> list[list[str]]:
    """Split a chunk's escrows, as (escrow_id, txs, vote bytes) in replay order, into consecutive parts of at most
    ``txs`` txs and ``vote_bytes`` bytes of votes; an escrow over either bound is a part of its own."""
    out: list[list[str]] = []
    n = b = 0
    for escrow_id, escrow_txs, escrow_bytes in sizes:
        if out and out[-1] and n + escrow_txs <= txs and b + escrow_bytes <= vote_bytes:
            out[-1].append(escrow_id)
            n, b = n + escrow_txs, b + escrow_bytes
        else:
            out.append([escrow_id])
            n, b = escrow_txs, escrow_bytes
    return out


def escrow_logs(conn: psycopg.Connection, ids: list[str], epochs: list[int]) -> dict[str, list[tuple]]:
    """Each escrow's rows in protocol order (machine.sort_key): by diff_nonce and tx_index, the order the hosts
    applied them in, then (for records without a tx_index) by kind code, inference_id and slot, which the tables'
    keys make unique within an escrow. One query per tx table returns each escrow's txs as column arrays (all
    aggregates of a group consume its rows in the same order, so the arrays line up) and zip makes the rows in C,
    each behind its (diff_nonce, tx_index) for the sort. The tx tables are partitioned by the escrows' epochs
    (docs/partitioning.md): naming them reads only those partitions."""
    keyed: dict[str, list[tuple]] = {}
    with conn.cursor(binary=True) as cur:
        for table, fields in SOURCES:
            columns = [f for f in fields if isinstance(f, str)]
            cur.execute(f"SELECT escrow_id, {', '.join(f'array_agg({c})' for c in columns)}, "
                        f"array_agg(coalesce(tx_index, -1)) FROM {table} "
                        "WHERE escrow_id = ANY(%s) AND epoch_index = ANY(%s) GROUP BY escrow_id", (ids, epochs))
            for escrow_id, *arrays in cur:
                by_name = dict(zip(columns, arrays))
                keyed.setdefault(escrow_id, []).extend(zip(by_name["diff_nonce"], arrays[-1], _rows(fields, by_name)))
    logs: dict[str, list[tuple]] = {}
    for escrow_id, rows in keyed.items():
        rows.sort()
        logs[escrow_id] = [row for _, _, row in rows]
    return logs


def _rows(fields: tuple, arrays: dict[str, list]):
    """One table's rows of one escrow from its column arrays; jsonb votes become (voter_slot, accept) pairs."""
    return zip(*(itertools.repeat(f) if not isinstance(f, str)
                 else map(_votes, arrays[f]) if f == "votes" else arrays[f] for f in fields))


def _votes(votes: list | None) -> tuple:
    return tuple((v["voter_slot"], v["accept"]) for v in votes) if votes else ()

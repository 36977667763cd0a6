"""Reading escrow logs from the tx tables for the replay: each escrow's txs as rows in protocol order, a chunk of
escrows read and handed out in parts of bounded size (:func:`log_parts`)."""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

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


def parts(sizes: Iterable[tuple[str, int, int]], txs: int, vote_bytes: int) -> Iterator[list[str]]:
    """Split a chunk's escrows, as (escrow_id, txs, vote bytes) in replay order, into consecutive parts of at most
    ``txs`` txs and ``vote_bytes`` bytes of votes; an escrow over either bound is a part of its own. Lazy: a part
    is handed out as soon as the next escrow does not fit it, before any escrow after that one is asked for."""
    part: list[str] = []
    n = b = 0
    for escrow_id, escrow_txs, escrow_bytes in sizes:
        if part and (n + escrow_txs > txs or b + escrow_bytes > vote_bytes):
            yield part
            part, n, b = [], 0, 0
        part.append(escrow_id)
        n, b = n + escrow_txs, b + escrow_bytes
    if part:
        yield part


def log_parts(conn: psycopg.Connection, ids: list[str], read: list[str], epochs: list[int], txs: int,
              vote_bytes: int) -> Iterator[tuple[list[str], dict[str, list[tuple]]]]:
    """The escrows of ``ids`` in consecutive parts of at most ``txs`` txs and ``vote_bytes`` bytes of votes (the
    rule of :func:`parts`; an escrow over either bound is a part of its own), each with the logs of its escrows
    in ``read`` (escrow_logs' rows), in escrow id order.

    The logs are measured as they are read, not counted first: one server-side cursor per tx table returns the
    escrows' groups in id order, and an escrow's groups are merged as the cursors reach it. Counting first cost
    the server as much as the read itself (it visits the same rows). What is held at once: the part being filled,
    the escrow just read and what each cursor fetched ahead (:class:`_Groups`: about ``txs`` / 7 txs each); the
    replay only ever sees a part. Caller's transaction (the cursors live in it)."""
    ordered = sorted(ids)  # str order is code point order, which is UTF-8 byte order: COLLATE "C" below
    if len(ordered) == 1:  # a small change: plain queries, no cursors to declare
        yield ordered, escrow_logs(conn, read, epochs) if read else {}
        return
    streams: list[_Groups] = []
    try:
        for table, fields in SOURCES:
            streams.append(_Groups(conn, len(streams), table, fields, read, epochs, max(1, txs // len(SOURCES))))
        logs: dict[str, list[tuple]] = {}

        def measured() -> Iterator[tuple[str, int, int]]:
            for escrow_id in ordered:
                keyed: list[tuple] = []
                escrow_bytes = 0
                for stream in streams:
                    group = stream.take(escrow_id)
                    if group is not None:
                        keyed.extend(_keyed(stream.fields, group[1:-1]))
                        escrow_bytes += group[-1]
                if keyed:
                    keyed.sort()
                    logs[escrow_id] = [row for _, _, row in keyed]
                yield escrow_id, len(keyed), escrow_bytes

        for part in parts(measured(), txs, vote_bytes):
            yield part, {escrow_id: logs.pop(escrow_id) for escrow_id in part if escrow_id in logs}
        for stream in streams:
            stream.done()
    finally:
        for stream in streams:
            stream.cursor.close()


class _Groups:
    """One tx table's groups (escrow_id, column arrays…, vote bytes) of a chunk, in escrow id order, from a
    server-side cursor. Fetched a few at a time: as many as hold about ``budget`` txs by the groups seen so far
    (one at first), so a chunk of large escrows is never fetched whole."""

    def __init__(self, conn, n: int, table: str, fields: tuple, read: list[str], epochs: list[int],
                 budget: int) -> None:
        self.table, self.fields, self.budget = table, fields, budget
        self.cursor = conn.cursor(name=f"replay_log_{n}", binary=True)
        self.cursor.execute(_GROUPED.format(table=table, columns=_aggregates(fields),
                                            votes="sum(pg_column_size(votes))" if "votes" in fields else "0"),
                            (read, epochs))
        self.ahead: list = []
        self.seen = self.rows = 0
        self.ended = False

    def take(self, escrow_id: str):
        """The group of ``escrow_id`` if it is the next one, else None (the table has no rows of it). A next group
        before it is a collation or a set that is not the chunk's: an error, never rows skipped silently."""
        head = self._head()
        if head is None or head[0] > escrow_id:
            return None
        if head[0] < escrow_id:
            raise RuntimeError(f"replay read: {self.table} returned escrow {head[0]!r} out of order (before "
                               f"{escrow_id!r})")
        self.ahead.pop()
        self.seen, self.rows = self.seen + 1, self.rows + len(head[1])
        return head

    def done(self) -> None:
        head = self._head()
        if head is not None:
            raise RuntimeError(f"replay read: {self.table} returned escrow {head[0]!r}, not one of the chunk's")

    def _head(self):
        if not self.ahead and not self.ended:
            size = 1 if not self.seen else max(1, min(64, self.budget * self.seen // max(self.rows, 1)))
            fetched = self.cursor.fetchmany(size)
            self.ended = len(fetched) < size
            self.ahead = fetched[::-1]
        return self.ahead[-1] if self.ahead else None


_GROUPED = ("SELECT escrow_id, {columns}, {votes} FROM {table} WHERE escrow_id = ANY(%s) AND epoch_index = ANY(%s) "
            'GROUP BY escrow_id ORDER BY escrow_id COLLATE "C"')


def _aggregates(fields: tuple) -> str:
    """The column arrays one tx table's query returns for an escrow: its fields' columns, then its tx_index."""
    return ", ".join([f"array_agg({c})" for c in fields if isinstance(c, str)] + ["array_agg(coalesce(tx_index, -1))"])


def _keyed(fields: tuple, arrays) -> Iterator[tuple]:
    """One table's rows of one escrow from its column arrays (in _aggregates' order), each behind its (diff_nonce,
    tx_index) for the sort."""
    by_name = dict(zip([c for c in fields if isinstance(c, str)], arrays))
    return zip(by_name["diff_nonce"], arrays[-1], _rows(fields, by_name))


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
            cur.execute(f"SELECT escrow_id, {_aggregates(fields)} FROM {table} "
                        "WHERE escrow_id = ANY(%s) AND epoch_index = ANY(%s) GROUP BY escrow_id", (ids, epochs))
            for escrow_id, *arrays in cur:
                keyed.setdefault(escrow_id, []).extend(_keyed(fields, arrays))
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

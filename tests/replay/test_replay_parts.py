"""A replay chunk holds a bounded number of txs in memory however large its escrows are (indexer.replay.reads.parts):
the chunk is read and replayed in parts, and the tables are those of a replay in one piece."""
from __future__ import annotations

import psycopg
import pytest

from indexer.load.ingest import ingest_paths
from indexer.replay.follow import ReplayFollower
from indexer.replay.reads import SOURCES, parts
from indexer.replay.run import replay_dirty
from indexer.synth import generate
from tests.support.helpers import table_snapshot, write_lines

REPLAYED = ["replay.inference", "replay.vote", "replay.slot_stats", "replay.escrow", "replay.rejected_tx"]


def escrow_sizes(conn, ids: list[str]) -> list[tuple[str, int, int]]:
    """(escrow_id, txs, bytes of votes) of each of ``ids``, counted apart from the replay's read: what
    reads.log_parts measures as it reads."""
    counted = {escrow_id: (n, b) for escrow_id, n, b in conn.execute(_SIZES, {"ids": ids})}
    return [(escrow_id, *counted.get(escrow_id, (0, 0))) for escrow_id in ids]


_SIZES = "SELECT escrow_id, sum(n)::int8, sum(b)::int8 FROM (" + " UNION ALL ".join(
    f"SELECT escrow_id, count(*) AS n, {'sum(pg_column_size(votes))' if 'votes' in fields else '0'} AS b "
    f"FROM {table} WHERE escrow_id = ANY(%(ids)s) GROUP BY escrow_id"
    for table, fields in SOURCES) + ") AS t GROUP BY escrow_id"

def test_parts_keep_the_order_and_both_bounds():
    sizes = [("a", 4, 0), ("b", 5, 0), ("c", 2, 90), ("d", 30, 0), ("e", 1, 5), ("f", 1, 5), ("g", 0, 0)]
    got = list(parts(sizes, 10, 100))
    assert [e for part in got for e in part] == list("abcdefg")
    assert got == [["a", "b"], ["c"], ["d"], ["e", "f", "g"]]  # c's votes; d alone over the tx bound
    by_id = {e: (n, b) for e, n, b in sizes}
    for part in got:
        if len(part) > 1:
            assert sum(by_id[e][0] for e in part) <= 10 and sum(by_id[e][1] for e in part) <= 100
    assert list(parts([], 10, 100)) == []


def _corpus(tmp_path):
    return write_lines(tmp_path / "p.ndjson", generate(seed=5, escrows=6, inferences=60, epochs=2,
                                                       mix="adversarial"))


def _largest_escrow(url: str) -> int:
    with psycopg.connect(url) as conn:
        ids = [r[0] for r in conn.execute("SELECT escrow_id FROM rec.escrow ORDER BY 1")]
        sizes = escrow_sizes(conn, ids)
    assert all(n > 0 for _, n, _ in sizes)
    with psycopg.connect(url) as conn:  # the counts are the rows the replay reads
        total = sum(conn.execute(f"SELECT count(*) FROM rec.{k}_tx").fetchone()[0] for k in (
            "start", "confirm_start", "finish", "validation", "validation_vote", "timeout", "error_miss"))
    assert sum(n for _, n, _ in sizes) == total
    return max(n for _, n, _ in sizes)


def test_a_chunk_holds_no_more_txs_than_the_bound(db_url, second_db_url, tmp_path):
    path = _corpus(tmp_path)
    for url in (db_url, second_db_url):
        ingest_paths(url, [str(path)])
    bound = _largest_escrow(db_url) + 1
    with psycopg.connect(second_db_url) as conn:
        whole = replay_dirty(conn, chunk=50, txs=10**9)
    with psycopg.connect(db_url) as conn:
        bounded = replay_dirty(conn, chunk=50, txs=bound)
    assert whole.peak_txs > bound, "the corpus is too small to need parts"
    assert 0 < bounded.peak_txs <= bound
    assert (bounded.escrows, bounded.txs, bounded.inferences, bounded.rejected) == (
        whole.escrows, whole.txs, whole.inferences, whole.rejected)
    assert table_snapshot(db_url, REPLAYED) == table_snapshot(second_db_url, REPLAYED)


def test_an_escrow_over_the_bound_is_replayed_alone(db_url, second_db_url, tmp_path):
    path = _corpus(tmp_path)
    for url in (db_url, second_db_url):
        ingest_paths(url, [str(path)])
    largest = _largest_escrow(db_url)
    with psycopg.connect(second_db_url) as conn:
        replay_dirty(conn, txs=10**9)
    with psycopg.connect(db_url) as conn:
        alone = replay_dirty(conn, txs=1)
    assert alone.peak_txs == largest
    assert table_snapshot(db_url, REPLAYED) == table_snapshot(second_db_url, REPLAYED)


def test_the_follower_keeps_its_chunks_within_the_bound(db_url, second_db_url, tmp_path):
    path = _corpus(tmp_path)
    ingest_paths(second_db_url, [str(path)])
    bound = _largest_escrow(second_db_url) + 1
    with ReplayFollower(db_url, after_lines=1, txs=bound) as follower:
        ingest_paths(db_url, [str(path)], batch_lines=97, on_batch=follower.batch)
        replayed = follower.finish(catch_up=True)
    assert replayed.escrows > 1
    assert 0 < replayed.peak_txs <= bound


def test_parts_read_as_they_go_equal_one_read_of_the_chunk(db_url, tmp_path):
    from indexer.replay.reads import escrow_logs, log_parts
    ingest_paths(db_url, [str(_corpus(tmp_path))])
    with psycopg.connect(db_url) as conn, conn.transaction():
        rows = conn.execute("SELECT escrow_id, epoch_index FROM rec.escrow ORDER BY 1").fetchall()
        ids, epochs = [r[0] for r in rows], sorted({r[1] for r in rows})
        whole = escrow_logs(conn, ids, epochs)
        sizes = dict((e, n) for e, n, _ in escrow_sizes(conn, ids))
        bound = max(sizes.values()) + 1
        got = list(log_parts(conn, list(reversed(ids)), ids, epochs, bound, 1 << 40))
    assert [e for part, _ in got for e in part] == sorted(ids)
    assert len(got) > 1 and all(sum(sizes[e] for e in part) <= bound for part, _ in got)
    assert {e: log for _, logs in got for e, log in logs.items()} == whole


def test_a_read_that_returns_an_escrow_outside_the_chunk_stops_the_chunk(db_url, tmp_path):
    # never skip rows silently: a group the merge cannot place (an order or a set not the chunk's) is an error
    from indexer.replay.reads import log_parts
    ingest_paths(db_url, [str(_corpus(tmp_path))])
    with psycopg.connect(db_url) as conn, conn.transaction():
        rows = conn.execute("SELECT escrow_id, epoch_index FROM rec.escrow ORDER BY 1").fetchall()
        ids, epochs = [r[0] for r in rows], sorted({r[1] for r in rows})
        with pytest.raises(RuntimeError, match=rf"rec\.start_tx returned escrow '{ids[1]}' out of order"):
            list(log_parts(conn, [ids[0], ids[2]], ids[:3], epochs, 10**9, 1 << 40))
        with pytest.raises(RuntimeError, match=rf"returned escrow '{ids[-1]}', not one of the chunk's"):
            list(log_parts(conn, ids[:-1], ids, epochs, 10**9, 1 << 40))


def test_a_cursor_fetches_ahead_only_about_its_budget_of_txs(db_url, tmp_path):
    # the groups of a chunk of large escrows are never fetched whole: one at first, then as many as hold the budget
    from indexer.replay.reads import SOURCES, _Groups
    ingest_paths(db_url, [str(_corpus(tmp_path))])
    with psycopg.connect(db_url) as conn, conn.transaction():
        rows = conn.execute("SELECT escrow_id, epoch_index FROM rec.escrow ORDER BY 1").fetchall()
        ids, epochs = [r[0] for r in rows], sorted({r[1] for r in rows})
        sizes = {e: n for e, n in conn.execute("SELECT escrow_id, count(*) FROM rec.start_tx GROUP BY 1")}
        table, fields = SOURCES[0]
        for budget, most in ((1, 1), (2 * max(sizes.values()), 2 * max(sizes.values()) // min(sizes.values()))):
            groups = _Groups(conn, 0, table, fields, ids, epochs, budget)
            taken, held = [], []
            for escrow_id in ids:
                group = groups.take(escrow_id)
                taken.append(len(group[1]))
                held.append(len(groups.ahead))
            groups.done()
            groups.cursor.close()
            assert taken == [sizes[e] for e in ids]
            assert max(held) <= most and (budget > 1 or held[0] == 0)

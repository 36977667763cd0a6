"""indexer.load.probe: a batch goes straight to COPY only when none of its keys can exist yet."""
from __future__ import annotations

import orjson

from indexer.load.ingest import BatchLoader
from indexer.load.prepare import prepare_batch
from indexer.load.probe import keys_may_exist


def _lines(records, first_line=1):
    return [(n, orjson.dumps(r)) for n, r in enumerate(records, start=first_line)]


def _batch(records, first_line=1):
    return prepare_batch(1, _lines(records, first_line))


def _commit(loader, records, first_line=1):
    lines = _lines(records, first_line)
    return loader.commit(prepare_batch(1, lines), lambda: lines)


def _start(escrow_id, inference_id):
    return {"kind": "start", "escrow_id": escrow_id, "inference_id": inference_id, "diff_nonce": inference_id}


def test_key_ranges_per_escrow_decide_whether_keys_may_exist(conn):
    conn.execute("INSERT INTO rec.source (source_id, digest, uri) VALUES (1, 'd', 'u')")
    loader = BatchLoader(conn, 1)
    records = [_start("e1", i) for i in range(1, 6)] + [_start("e2", 1)]
    first = _batch(records)
    assert first.kinds["start"].key_ranges == {"e1": (1, 5), "e2": (1, 1)}
    assert not keys_may_exist(conn, "start", first.kinds["start"])
    _commit(loader, records)
    # the next block continues escrow e1 past its committed keys: no key can exist, the direct COPY is safe
    later = _batch([_start("e1", i) for i in range(6, 9)] + [_start("e3", 4)], first_line=7)
    assert not keys_may_exist(conn, "start", later.kinds["start"])
    # a range that covers a committed key (a reload, an amendment, blocks out of key order) may collide
    overlapping = _batch([_start("e1", 9), _start("e1", 3)], first_line=20)
    assert overlapping.kinds["start"].key_ranges == {"e1": (3, 9)}
    assert keys_may_exist(conn, "start", overlapping.kinds["start"])
    assert keys_may_exist(conn, "start", _batch([_start("e2", 1)]).kinds["start"])


def test_kinds_keyed_by_the_escrow_alone_keep_the_scope_probe(conn):
    escrow = {"kind": "escrow", "escrow_id": "e9", "epoch_index": 1, "model_id": "m", "slots": ["a", "b"]}
    batch = _batch([escrow]).kinds["escrow"]
    assert batch.key_ranges == {}
    assert not keys_may_exist(conn, "escrow", batch)
    conn.execute("INSERT INTO rec.source (source_id, digest, uri) VALUES (1, 'd', 'u')")
    _commit(BatchLoader(conn, 1), [escrow])
    assert keys_may_exist(conn, "escrow", batch)


def test_the_probe_of_the_partition_a_batch_goes_to_finds_what_the_parent_finds(conn):
    """The commit probes the one epoch partition a batch is routed to (EpochRouter.targets). An escrow's rows are
    all in the partition its registry names, including the txs that arrived before it and were moved on its load,
    so the answer is the parent's; the partition the rows left says no."""
    conn.execute("INSERT INTO rec.source (source_id, digest, uri) VALUES (1, 'd', 'u')")
    loader = BatchLoader(conn, 1)
    _commit(loader, [_start("e1", i) for i in range(1, 6)])  # before its escrow: the unassigned partition
    escrow = {"kind": "escrow", "escrow_id": "e1", "epoch_index": 7, "model_id": "m", "slots": ["a", "b"]}
    _commit(loader, [escrow], first_line=10)  # moves them to epoch 7's partition
    assert conn.execute("SELECT DISTINCT tableoid::regclass::text FROM rec.start_tx").fetchall() == [
        ("part.rec_start_tx_e7",)]
    overlapping = _batch([_start("e1", 4), _start("e1", 9)], first_line=20).kinds["start"]
    beyond = _batch([_start("e1", 6), _start("e1", 9)], first_line=20).kinds["start"]
    for table in (None, "rec.start_tx", "part.rec_start_tx_e7"):
        assert keys_may_exist(conn, "start", overlapping, table)
        assert not keys_may_exist(conn, "start", beyond, table)
    assert not keys_may_exist(conn, "start", overlapping, "part.rec_start_tx_unassigned")

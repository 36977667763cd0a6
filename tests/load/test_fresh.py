"""indexer.load.fresh: the keys of an escrow this load registered are new without a probe, in either record order;
an amendment, a reload or a concurrent writer still ends exactly as the probed load did."""
from __future__ import annotations

import orjson
import psycopg
import pytest

from indexer.load import probe
from indexer.load.ingest import BatchLoader
from indexer.load.prepare import prepare_batch
from tests.support.helpers import escrow, tx


def _commit(loader, records, first_line=1):
    lines = [(n, orjson.dumps(r)) for n, r in enumerate(records, start=first_line)]
    return loader.commit(prepare_batch(1, lines), lambda: lines)


@pytest.fixture
def probes(monkeypatch):
    """The escrows each database probe of the load asked about, as (kind, sorted escrows)."""
    asked: list[tuple[str, list]] = []
    real = probe._probe

    def counting(conn, kind, batch, table, only):
        scopes = sorted(batch.scope if only is None else batch.scope & only)
        if scopes:
            asked.append((kind, scopes))
        return real(conn, kind, batch, table, only)

    monkeypatch.setattr(probe, "_probe", counting)
    return asked


def _source(conn):
    conn.execute("INSERT INTO rec.source (source_id, digest, uri) VALUES (1, 'd', 'u')")


def _starts(escrow_id, ids, tokens=10):
    return [tx("start", i, i, escrow_id, prompt_hash="ab" * 32, max_tokens=tokens) for i in ids]


@pytest.mark.parametrize("escrow_first", [True, False], ids=["escrow-first", "txs-first"])
def test_an_escrow_this_load_registered_is_never_probed(conn, probes, escrow_first):
    """Batches continue escrows of earlier batches (a block cut inside an escrow, or an interleaved stream): their
    tx keys go straight in, whether the escrow record came before its txs or after them."""
    _source(conn)
    loader = BatchLoader(conn, 1)
    head = [escrow("e1", epoch=5)] if escrow_first else []
    _commit(loader, head + _starts("e1", range(1, 4)) + _starts("e2", range(1, 3)))
    second = _commit(loader, _starts("e1", range(4, 7)) + _starts("e2", range(3, 5)) + [escrow("e2", epoch=5)]
                     + _starts("e3", [1]), first_line=20)
    assert [p for p in probes if p[0] != "escrow"] == []
    assert second.loaded == 7 and second.amended == 0
    assert conn.execute("SELECT escrow_id, count(*) FROM rec.start_tx GROUP BY 1 ORDER BY 1").fetchall() == [
        ("e1", 6), ("e2", 4), ("e3", 1)]


def test_a_key_written_earlier_in_the_load_is_probed_and_amended(conn, probes):
    _source(conn)
    loader = BatchLoader(conn, 1)
    _commit(loader, [escrow("e1", epoch=5)] + _starts("e1", range(1, 6)))
    later = _commit(loader, _starts("e1", [3], tokens=99) + _starts("e1", [6]), first_line=20)
    assert ("start", ["e1"]) in probes
    assert (later.loaded, later.amended) == (1, 1)
    assert conn.execute("SELECT max_tokens, revision FROM rec.start_tx WHERE inference_id = 3").fetchone() == (99, 2)
    assert conn.execute("SELECT kind, record_key FROM rec.amendment").fetchall() == [("start", ["e1", 3])]


def test_escrows_of_an_earlier_load_are_probed(conn, probes):
    _source(conn)
    records = [escrow("e1", epoch=5)] + _starts("e1", range(1, 4))
    _commit(BatchLoader(conn, 1), records)
    again = _commit(BatchLoader(conn, 1), records)  # a new loader: the registry was there before it
    assert ("start", ["e1"]) in probes
    assert (again.loaded, again.amended, again.unchanged) == (0, 0, 4)


def test_a_concurrent_writer_of_a_registered_escrow_meets_the_unique_index(conn, db_url, probes, caplog):
    """Another loader writes a key of an escrow this loader registered (it found the registry row, so it probed).
    This loader's next batch skips the probe, its COPY (in no savepoint) meets the key and rolls the batch back;
    the batch runs again with a savepoint around each direct write, and the staged upsert decides, exactly."""
    _source(conn)
    loader = BatchLoader(conn, 1)
    _commit(loader, [escrow("e1", epoch=5)] + _starts("e1", range(1, 4)))
    conn.execute("INSERT INTO rec.source (source_id, digest, uri) VALUES (2, 'd2', 'u2')")
    with psycopg.connect(db_url) as other:
        lines = [(50, orjson.dumps(r)) for r in _starts("e1", [5], tokens=7)]
        BatchLoader(other, 2).commit(prepare_batch(2, lines), lambda: lines)
    probes.clear()
    with caplog.at_level("INFO", logger="indexer.load.ingest"):
        later = _commit(loader, _starts("e1", range(4, 7), tokens=8), first_line=20)
    assert [p for p in probes if p[0] == "start"] == []  # not asked: the unique index answered
    assert "written concurrently" in caplog.text and not loader.guarded
    assert (later.loaded, later.amended) == (2, 1)
    assert conn.execute("SELECT inference_id, max_tokens FROM rec.start_tx ORDER BY 1").fetchall() == [
        (1, 10), (2, 10), (3, 10), (4, 8), (5, 8), (6, 8)]


def test_a_batch_rolled_back_registers_nothing(conn, monkeypatch):
    _source(conn)
    loader = BatchLoader(conn, 1)

    def fail(*_):
        raise RuntimeError("after the rows")

    monkeypatch.setattr("indexer.load.ingest.refusals.store", fail)
    with pytest.raises(RuntimeError):
        _commit(loader, [escrow("e1", epoch=5)] + _starts("e1", range(1, 4)))
    assert loader.known.fresh == set() and loader.known.high == {}
    assert conn.execute("SELECT count(*) FROM rec.escrow_epoch").fetchone()[0] == 0


def test_a_rolled_back_caller_transaction_forgets_what_its_batches_registered(db_url):
    """The poller commits a cycle's batches inside a transaction of its own; when that rolls back, so do the
    registry rows, and the loader starts again from the database (indexer.poller.store calls forget)."""
    with psycopg.connect(db_url) as conn:
        _source(conn)
        conn.commit()
        loader = BatchLoader(conn, 1)
        with pytest.raises(RuntimeError), conn.transaction():
            _commit(loader, [escrow("e1", epoch=5)] + _starts("e1", range(1, 4)))
            assert loader.known.fresh == {"e1"}
            raise RuntimeError("a later step of the cycle")
        loader.forget()
        assert loader.known.fresh == set() and loader.known.high == {}
        assert conn.execute("SELECT count(*) FROM rec.escrow_epoch").fetchone()[0] == 0


def test_past_its_limit_the_memory_starts_again():
    from indexer.load.fresh import KnownNew
    from indexer.load.prepare import KindBatch

    known = KnownNew(limit=2)
    known.committed({"a", "b"}, {"start": KindBatch(b"", 2, {"a", "b"}, key_ranges={"a": (1, 3), "b": (1, 1)})})
    assert known.fresh == {"a", "b"} and known.high["start"] == {"a": 3, "b": 1}
    known.committed({"c"}, {})
    assert known.fresh == {"c"} and known.high == {}
    assert known.to_probe("start", KindBatch(b"", 1, {"a"}, key_ranges={"a": (4, 4)}), set()) == {"a"}

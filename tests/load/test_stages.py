"""The loader's stage tables (pg_temp.stage_<kind>) are made when a batch first stages that kind, not all of them for
every load; a stage made by a batch that rolled back, alone or with its caller's transaction, is made again."""
from __future__ import annotations

import orjson
import pytest

from indexer.load import ingest
from indexer.load.ingest import BatchLoader
from indexer.load.prepare import prepare_batch
from tests.support.helpers import escrow, tx


def _commit(loader, records, first_line=1):
    lines = [(n, orjson.dumps(r)) for n, r in enumerate(records, start=first_line)]
    return loader.commit(prepare_batch(1, lines), lambda: lines)


def _stages(conn) -> list[str]:
    return [r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relnamespace = pg_my_temp_schema() "
                                       "AND relkind = 'r' ORDER BY 1")]


def _starts(ids, tokens):
    return [tx("start", i, i, "e1", prompt_hash="ab" * 32, max_tokens=tokens) for i in ids]


@pytest.fixture
def loader(conn):
    conn.execute("INSERT INTO rec.source (source_id, digest, uri) VALUES (1, 'd', 'u')")
    return BatchLoader(conn, 1)


def test_a_stage_is_made_when_a_batch_first_needs_it(conn, loader):
    assert _stages(conn) == []
    _commit(loader, [escrow("e1", epoch=5)] + _starts(range(1, 4), 10))  # all new: straight into the tables
    assert _stages(conn) == []
    amended = _commit(loader, _starts([2], 99), first_line=10)  # a key that exists: staged, then upserted
    assert (amended.loaded, amended.amended) == (0, 1)
    assert _stages(conn) == ["stage_start"]
    again = _commit(loader, _starts([3], 99), first_line=20)
    assert (again.amended, _stages(conn)) == (1, ["stage_start"])
    assert conn.execute("SELECT count(*) FROM pg_temp.stage_start").fetchone()[0] == 0  # emptied before commit


def test_a_stage_made_by_a_batch_that_rolled_back_is_made_again(conn, loader, monkeypatch):
    _commit(loader, [escrow("e1", epoch=5)] + _starts(range(1, 4), 10))
    failing = monkeypatch.context()
    with failing as patched:
        patched.setattr(ingest.refusals, "store", lambda *a: (_ for _ in ()).throw(RuntimeError("store failed")))
        with pytest.raises(RuntimeError, match="store failed"):
            _commit(loader, _starts([1], 50), first_line=10)
    assert _stages(conn) == []  # rolled back with its batch
    assert _commit(loader, _starts([1], 51), first_line=10).amended == 1

    assert conn.execute("SELECT max_tokens FROM rec.start_tx WHERE inference_id = 1").fetchone() == (51,)


def test_a_stage_made_in_a_caller_transaction_that_rolled_back_is_made_again(conn, loader):
    """The poller commits batches inside a transaction of its own, and tells the loader to forget when it rolls
    back (indexer.poller.store)."""
    _commit(loader, [escrow("e1", epoch=5)] + _starts(range(1, 4), 10))
    with pytest.raises(RuntimeError, match="caller rolled back"):
        with conn.transaction():
            assert _commit(loader, _starts([2], 52), first_line=20).amended == 1
            assert _stages(conn) == ["stage_start"]
            raise RuntimeError("caller rolled back")
    assert _stages(conn) == []
    loader.forget()
    assert _commit(loader, _starts([2], 53), first_line=20).amended == 1
    assert conn.execute("SELECT max_tokens FROM rec.start_tx WHERE inference_id = 2").fetchone() == (53,)

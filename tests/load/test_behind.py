"""indexer.load.behind: the partitions of the epochs a load has moved past are analysed beside the load."""
from __future__ import annotations

import orjson

from indexer.db.scratch import with_database
from indexer.load.behind import AnalyzeBehind
from indexer.load.ingest import BatchLoader
from indexer.load.prepare import prepare_batch
from tests.support.helpers import escrow, tx


def _commit(loader, records, first_line):
    lines = [(n, orjson.dumps(r)) for n, r in enumerate(records, start=first_line)]
    return loader.commit(prepare_batch(1, lines), lambda: lines)


def _epoch_batch(epoch: int) -> list[dict]:
    escrow_id = f"e{epoch}"
    return [escrow(escrow_id, epoch=epoch)] + [tx("start", i, i, escrow_id, prompt_hash="ab" * 32, max_tokens=5)
                                               for i in range(1, 30)]


def _analysed(conn) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT tablename FROM pg_stats WHERE schemaname = 'part' AND tablename ~ '^rec_start_tx_e[0-9]+$' "
        "ORDER BY 1")]


def _load(conn, behind: AnalyzeBehind, epochs: list[int]) -> None:
    conn.execute("INSERT INTO rec.source (source_id, digest, uri) VALUES (1, 'd', 'u')")
    loader = BatchLoader(conn, 1)
    loader.behind = behind
    for n, epoch in enumerate(epochs):
        _commit(loader, _epoch_batch(epoch), first_line=100 * n + 1)


def test_an_epoch_two_batches_did_not_write_is_analysed_before_the_load_ends(db_url, conn):
    with AnalyzeBehind(db_url) as behind:
        _load(conn, behind, [5, 6, 7, 8])
        deferred = behind.close()
        assert behind.analyzed == [5, 6]  # 7 and 8 were written by the last two batches: the final pass's
    assert deferred.tables == []
    assert _analysed(conn) == ["rec_start_tx_e5", "rec_start_tx_e6"]


def test_a_connection_refused_leaves_the_statistics_to_the_final_pass(db_url, conn, caplog):
    with caplog.at_level("WARNING", logger="indexer.load.behind"):
        with AnalyzeBehind(with_database(db_url, "no_such_database")) as behind:
            _load(conn, behind, [5, 6, 7, 8])
            assert behind.close().tables == []
    assert behind.analyzed == [] and _analysed(conn) == []
    assert "analysing the epochs behind the load stopped" in caplog.text
    assert conn.execute("SELECT count(*) FROM rec.start_tx").fetchone()[0] == 4 * 29  # the load went on

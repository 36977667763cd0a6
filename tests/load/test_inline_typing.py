"""An input of one block is typed in the loading process (indexer.load.typing_pool.InlineTyping), with exactly the
rows, quarantine and counts the typing processes give for the same file; an input of several blocks still goes to
the processes."""
from __future__ import annotations

import orjson
import psycopg
import pytest

from indexer import workers
from indexer.load import ingest
from indexer.load.ingest import ingest_paths
from indexer.load.typing_pool import TypingPool
from indexer.records import KINDS
from indexer.synth import generate
from tests.support.helpers import table_snapshot, write_lines

LOADED = sorted(f"rec.{kind.table}" for kind in KINDS.values())


def _small_file(tmp_path):
    """A few escrows' records, with a malformed line, an unknown kind and a slot out of range among them."""
    records = [orjson.dumps(r) for r in generate(seed=21, escrows=3, inferences=20, epochs=1)]
    escrow = next(orjson.loads(r) for r in records if orjson.loads(r)["kind"] == "escrow")
    bad = [b'{"kind": "finish", "escrow_id": ', b'{"kind": "no_such_kind", "escrow_id": "1"}',
           orjson.dumps({"kind": "validation", "escrow_id": escrow["escrow_id"], "inference_id": 1,
                         "validator_slot": 999, "diff_nonce": 10**6, "valid": True})]
    third = len(records) // 3
    return write_lines(tmp_path / "small.ndjson", records[:third] + bad[:2] + records[third:] + bad[2:])


def _no_processes(*args, **kwargs):
    raise AssertionError("a one-block input started typing processes")


def _quarantine(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT line, kind, reason, raw FROM rec.quarantine ORDER BY line").fetchall()


def _counts(summary) -> tuple:
    return (summary.lines, summary.loaded, summary.amended, summary.unchanged, summary.quarantined,
            dict(summary.by_kind), summary.epochs)


def test_a_one_block_input_is_typed_inline_with_the_rows_of_the_typing_processes(db_url, second_db_url, tmp_path,
                                                                                 monkeypatch):
    path = _small_file(tmp_path)
    pools = []

    def pool(source_id, resume_after):  # the same block, typed by the processes
        pools.append(TypingPool(ingest.PREPARE_WORKERS, source_id, resume_after))
        return pools[-1]

    with monkeypatch.context() as patched:
        patched.setattr(ingest, "InlineTyping", pool)
        by_processes = ingest_paths(second_db_url, [str(path)])
    assert len(pools) == 1

    monkeypatch.setattr(workers, "pool", _no_processes)
    inline = ingest_paths(db_url, [str(path)])
    assert inline.quarantined == 3 and inline.loaded > 100
    assert _counts(inline) == _counts(by_processes)
    assert _quarantine(db_url) == _quarantine(second_db_url)
    assert table_snapshot(db_url, LOADED) == table_snapshot(second_db_url, LOADED)

    # loaded again (a completed file is read again from its start): every record unchanged, both ways
    again = ingest_paths(db_url, [str(path)])
    assert again.unchanged == inline.loaded and again.loaded == again.amended == 0


def test_an_input_of_several_blocks_is_typed_by_the_processes(db_url, tmp_path, monkeypatch):
    path = _small_file(tmp_path)
    monkeypatch.setattr(workers, "pool", _no_processes)
    with pytest.raises(AssertionError, match="started typing processes"):
        ingest_paths(db_url, [str(path)], batch_lines=64)  # first blocks of 8 lines: many blocks


def test_a_file_of_one_line_past_the_size_limit_is_quarantined_inline(db_url, tmp_path, monkeypatch):
    from indexer.sources import ndjson

    monkeypatch.setattr(ndjson, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(workers, "pool", _no_processes)
    path = tmp_path / "long.ndjson"
    path.write_bytes(b'{"kind":"start","escrow_id":"' + b"x" * (2 << 20) + b'"}\n')
    summary = ingest_paths(db_url, [str(path)])
    assert (summary.lines, summary.quarantined, summary.loaded) == (1, 1, 0)
    ((line, kind, reason, raw),) = _quarantine(db_url)
    assert line == 1 and kind is None and reason.startswith("line of ") and "over the 1048576-byte limit" in reason
    assert raw.endswith("more bytes not kept)")


def test_a_one_block_input_resumed_past_its_committed_lines_is_only_counted(db_url, tmp_path, monkeypatch):
    """A crash between the batch's commit and the file's completion: the rerun types the block here and skips the
    lines the cursor says are committed, as the processes would."""
    path = _small_file(tmp_path)
    monkeypatch.setattr(workers, "pool", _no_processes)
    first = ingest_paths(db_url, [str(path)])
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE rec.source SET completed_at = NULL")
    before = table_snapshot(db_url, LOADED)
    rerun = ingest_paths(db_url, [str(path)])
    assert rerun.skipped_resumed == first.lines and rerun.lines == rerun.loaded == rerun.amended == 0
    assert table_snapshot(db_url, LOADED) == before

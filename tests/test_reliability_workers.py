"""A typing process that dies under `indexer ingest` (killed, out of memory, a crash in native code): its pool is
replaced and the blocks in flight typed again, so one death loses nothing and stops nothing; a block that kills its
worker twice ends the load with one clear error naming the file and its lines, and a rerun resumes after the lines
committed before it."""
from __future__ import annotations

import psycopg
import pytest

from indexer.load.ingest import IngestFailed, ingest_paths
from indexer.records import KINDS
from indexer.synth import generate
from tests import worker_crash
from tests.helpers import table_snapshot, write_lines

LOADED = sorted(f"rec.{kind.table}" for kind in KINDS.values())
BATCH = 400  # lines a block at most: the file below makes a dozen blocks, the crash in a middle one


@pytest.fixture
def crashing(monkeypatch, tmp_path):
    """The load's typing function, dying on the block that holds the given line (once, or every time)."""
    monkeypatch.setattr("indexer.load.typists.prepare_block", worker_crash.type_or_die)

    def arm(line: int, once: bool) -> None:
        monkeypatch.setenv("WORKER_CRASH_LINE", str(line))
        if once:
            monkeypatch.setenv("WORKER_CRASH_ONCE", str(tmp_path / "died-once"))
        else:
            monkeypatch.delenv("WORKER_CRASH_ONCE", raising=False)
    return arm


def _file(tmp_path):
    return write_lines(tmp_path / "w.ndjson", generate(seed=11, escrows=12, inferences=120, epochs=1))


def _committed(url: str) -> int:
    with psycopg.connect(url) as c:
        return c.execute("SELECT coalesce(max(lines_committed), 0) FROM rec.source").fetchone()[0]


def test_a_typing_process_that_dies_once_loses_nothing(db_url, second_db_url, tmp_path, crashing):
    path = _file(tmp_path)
    lines = sum(1 for _ in open(path, "rb"))
    ingest_paths(second_db_url, [str(path)], batch_lines=BATCH)
    crashing(lines // 2, once=True)
    summary = ingest_paths(db_url, [str(path)], batch_lines=BATCH)
    assert (tmp_path / "died-once").exists()  # the worker did die
    assert summary.lines == lines and _committed(db_url) == lines
    assert table_snapshot(db_url, LOADED) == table_snapshot(second_db_url, LOADED)


def test_a_block_that_kills_its_worker_twice_ends_the_load_naming_file_and_lines(db_url, second_db_url, tmp_path,
                                                                                  crashing):
    path = _file(tmp_path)
    lines = sum(1 for _ in open(path, "rb"))
    ingest_paths(second_db_url, [str(path)], batch_lines=BATCH)
    crashing(lines // 2, once=False)
    with pytest.raises(IngestFailed) as failed:
        ingest_paths(db_url, [str(path)], batch_lines=BATCH)
    message = str(failed.value)
    committed = _committed(db_url)
    assert 0 < committed < lines // 2
    assert failed.value.uri == str(path.resolve()) and failed.value.line == committed
    assert "a typing process died twice on lines " in message and f"after line {committed} was committed" in message
    first, last = map(int, message.split("died twice on lines ")[1].split()[0].split("-"))
    assert first == committed + 1 and first <= lines // 2 <= last
    assert "run the same command again" in message

    crashing(0, once=False)  # the machine has its memory back: the same command resumes and completes the load
    ingest_paths(db_url, [str(path)], batch_lines=BATCH)
    assert _committed(db_url) == lines
    assert table_snapshot(db_url, LOADED) == table_snapshot(second_db_url, LOADED)

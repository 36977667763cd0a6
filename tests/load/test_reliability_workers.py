"""Bad moments and bad lines under `indexer ingest` that must not cost the load its memory or its work.

A typing process that dies (killed, out of memory, a crash in native code): its pool is replaced and the blocks in
flight typed again, so one death loses nothing and stops nothing; a block that kills its worker twice ends the load
with one clear error naming the file and its lines, and a rerun resumes after the lines committed before it. A line
past the size limit is quarantined without being held."""
from __future__ import annotations

import orjson
import psycopg
import pytest

from indexer.load.ingest import IngestFailed, ingest_paths
from indexer.records import KINDS
from indexer.synth import generate
from tests.support import worker_crash
from tests.support.helpers import table_snapshot, write_lines

LOADED = sorted(f"rec.{kind.table}" for kind in KINDS.values())
BATCH = 400  # lines a block at most: the file below makes a dozen blocks, the crash in a middle one


@pytest.fixture
def crashing(monkeypatch, tmp_path):
    """The load's typing function, dying on the block that holds the given line (once, or every time)."""
    monkeypatch.setattr("indexer.load.typing_pool.prepare_file_block", worker_crash.type_or_die)

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


def test_a_line_past_the_size_limit_is_quarantined_and_the_load_goes_on(db_url, second_db_url, tmp_path, monkeypatch):
    """A line past MAX_LINE_BYTES (a file without newlines, a corrupt or hostile record) is read past, never held:
    one quarantine row names its line, its length and the limit, with its first bytes; every other line loads as
    if it were not there."""
    from indexer.sources import ndjson

    monkeypatch.setattr(ndjson, "MAX_LINE_BYTES", 1 << 20)
    records = [orjson.dumps(r) for r in generate(seed=12, escrows=6, inferences=60, epochs=1)]
    long = b'{"kind":"start","escrow_id":"' + b"x" * (3 << 20) + b'"}'
    at = len(records) // 2
    write_lines(tmp_path / "without.ndjson", records)
    path = write_lines(tmp_path / "with.ndjson", records[:at] + [long] + records[at:])
    ingest_paths(second_db_url, [str(tmp_path / "without.ndjson")], batch_lines=BATCH)
    summary = ingest_paths(db_url, [str(path)], batch_lines=BATCH)
    assert summary.quarantined == 1 and _committed(db_url) == len(records) + 1
    with psycopg.connect(db_url) as c:
        line, reason, raw = c.execute("SELECT line, reason, raw FROM rec.quarantine").fetchone()
    assert line == at + 1
    assert reason == f"line of {len(long)} bytes, over the {1 << 20}-byte limit: read past, not loaded"
    assert raw.startswith('{"kind":"start","escrow_id":"xxx') and raw.endswith("more bytes not kept)")
    assert len(raw) < 5000
    assert table_snapshot(db_url, LOADED) == table_snapshot(second_db_url, LOADED)

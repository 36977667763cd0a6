"""A batch whose upsert meets a key that a concurrent transaction inserts (and commits while the upsert waits on it)
merges into that row as it would into one committed before: the batch is loaded again once the other has
committed, rather than the record being counted unchanged and lost (its statement's snapshot cannot see the row)."""
from __future__ import annotations

import psycopg
import pytest

from tests.support.helpers import escrow, ingest, tx, write_lines
from tests.support.locks import Background, waits_on_a_lock

H = "ab" * 32
PAYLOAD = '{"events": ["data: [DONE]"]}'


def _finish(inference_id: int, **kw) -> dict:
    return tx("finish", inference_id, 3 * inference_id + 1, executor_slot=1, input_tokens=0, output_tokens=0,
              response_hash=H, **kw)


def _other_writer(db_url, conn, tmp_path) -> psycopg.Connection:
    """Inferences 1 and 2 started, 1 finished; then another writer's transaction, not committed yet, holding
    inference 2's Finish without its payload."""
    starts = [tx("start", i, 3 * i, prompt_hash=H, max_tokens=100, input_length=10) for i in (1, 2)]
    ingest(db_url, write_lines(tmp_path / "first.ndjson", [escrow(), *starts, _finish(1)]))
    source, epoch = conn.execute("SELECT source_id, epoch_index FROM rec.start_tx LIMIT 1").fetchone()
    conn.commit()
    other = psycopg.connect(db_url)
    other.execute("INSERT INTO rec.finish_tx (escrow_id, inference_id, diff_nonce, executor_slot, input_tokens, "
                  "output_tokens, response_hash, source_id, source_line, epoch_index) "
                  "VALUES ('1971', 2, 7, 1, 0, 0, %s, %s, 99, %s)", (H, source, epoch))
    return other


def _load_meeting_a_concurrent_key(db_url, conn, tmp_path) -> tuple:
    """A load whose batch amends inference 1's Finish (so it is upserted) and brings inference 2's with its payload,
    started while another writer holds inference 2's Finish uncommitted, which commits once the load's upsert waits
    on it: the file and the load (running in the background)."""
    other = _other_writer(db_url, conn, tmp_path)
    path = write_lines(tmp_path / "second.ndjson", [_finish(1, response_payload=PAYLOAD),
                                                    _finish(2, response_payload=PAYLOAD)])
    loading = Background(lambda: ingest(db_url, path))
    try:
        waits_on_a_lock(db_url)
        other.commit()
    finally:
        other.close()
    return path, loading


def test_a_key_inserted_concurrently_while_the_upsert_waits_is_merged_into(db_url, conn, tmp_path):
    _, loading = _load_meeting_a_concurrent_key(db_url, conn, tmp_path)
    summary = loading.result()
    assert conn.execute("SELECT inference_id, response_payload FROM rec.finish_tx ORDER BY 1").fetchall() == [
        (1, PAYLOAD), (2, PAYLOAD)]
    assert (summary.amended, summary.unchanged) == (2, 0)


def test_a_batch_that_keeps_meeting_concurrent_keys_fails_naming_its_file_and_line(db_url, conn, tmp_path,
                                                                                   monkeypatch):
    from indexer.load import ingest as loading
    from indexer.load.errors import IngestFailed

    monkeypatch.setattr(loading, "KEY_RACE_ATTEMPTS", 1)  # the first race is the last allowed
    path, load = _load_meeting_a_concurrent_key(db_url, conn, tmp_path)
    with pytest.raises(IngestFailed) as failed:
        load.result()
    assert str(failed.value) == (
        f"{path}: concurrent loads wrote the batch's keys first in 1 attempt(s) after line 0 was "
        f"committed (1 finish key(s) written by a concurrent load while this one waited); run "
        f"the same command again to resume from there")
    # nothing of the batch was committed; a rerun loads it
    assert conn.execute("SELECT response_payload FROM rec.finish_tx WHERE inference_id = 1").fetchone() == (None,)
    ingest(db_url, path)
    assert conn.execute("SELECT count(response_payload) FROM rec.finish_tx").fetchone() == (2,)

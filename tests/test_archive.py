"""`indexer archive`: old epochs to compressed NDJSON and out of the database; `ingest` of the files brings back the
same records, and after replay and rules the same derived rows."""
from __future__ import annotations

import gzip
import hashlib
import json

import psycopg
import pytest

from indexer import archive as archive_mod
from indexer.archive import NotFinal, archive, epoch_file
from tests.helpers import ingest, table_snapshot
from tests.partition_kit import EPOCHS

RULES = ["rules.context_refusal", "rules.sibling_finding", "rules.suspect", "rules.challenge", "rules.escrow_limit",
         "rules.model_limit", "rules.refusal_parse"]


@pytest.fixture
def loaded(three_epochs):
    """The partition tests' three epochs (loaded, replayed, rules run), the first two final."""
    with psycopg.connect(three_epochs) as c:
        c.execute("INSERT INTO net.epoch_state (epoch_index, state) SELECT e, 'final' FROM unnest(%s::bigint[]) e",
                  (list(EPOCHS[:2]),))
    return three_epochs


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as c:
        rec_replay = [r[0] for r in c.execute(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_schema IN ('rec', 'replay') AND table_name NOT IN ('source', 'amendment', 'quarantine') "
            "ORDER BY 1")]
    return rec_replay + RULES


def _state(url: str) -> dict:
    state = table_snapshot(url, _tables(url))
    with psycopg.connect(url) as c:  # detected_at is when a finding was first seen: not a property of the data
        state["rules.disputable"] = c.execute(
            "SELECT epoch_index, escrow_id, inference_id, penalty, rule, verdict, evidence FROM rules.disputable "
            "ORDER BY 2, 3, 4").fetchall()
    return state


def _epochs_in_db(url: str) -> set[int]:
    with psycopg.connect(url) as c:
        return {r[0] for r in c.execute("SELECT epoch_index FROM rec.escrow UNION SELECT epoch_index FROM rec.epoch "
                                        "UNION SELECT epoch_index FROM rec.finish_tx "
                                        "UNION SELECT epoch_index FROM replay.inference "
                                        "UNION SELECT epoch_index FROM rules.suspect")}  # unpartitioned (Citus)


def test_archive_then_ingest_restores_the_same_rows(loaded, tmp_path):
    before = _state(loaded)
    out = tmp_path / "archive"
    summary = archive(loaded, 402, str(out))
    assert summary.dropped == [400, 401] and summary.written == [400, 401]
    assert _epochs_in_db(loaded) == {402}
    with psycopg.connect(loaded) as c:
        assert c.execute("SELECT to_regclass('part.rec_finish_tx_e400'), to_regclass('part.replay_inference_e401')"
                         ).fetchone() == (None, None)
        assert c.execute("SELECT to_regclass('part.rec_finish_tx_e402') IS NOT NULL").fetchone() == (True,)

    manifest = json.loads((out / "manifest.json").read_text())
    for epoch in (400, 401):
        entry = manifest["epochs"][str(epoch)]
        data = (out / epoch_file(epoch)).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        lines = gzip.decompress(data).splitlines()
        assert len(lines) == sum(entry["records"].values()) > 0
        records = [json.loads(line) for line in lines]
        assert {r["epoch_index"] for r in records if r["kind"] == "escrow"} == {epoch}
    assert before != _state(loaded)

    for epoch in (400, 401):
        ingest(loaded, out / epoch_file(epoch), rules=True)
    assert _state(loaded) == before


def test_archive_refuses_epochs_not_final_unless_forced(loaded, tmp_path):
    with pytest.raises(NotFinal, match="402"):
        archive(loaded, 403, str(tmp_path / "a"))
    assert _epochs_in_db(loaded) == set(EPOCHS)  # refused before anything was dropped
    assert archive(loaded, 403, str(tmp_path / "a"), force=True).dropped == list(EPOCHS)
    assert _epochs_in_db(loaded) == set()


def test_rerun_after_a_crash_mid_way_finishes_the_job(loaded, tmp_path, monkeypatch):
    before = _state(loaded)
    out = tmp_path / "archive"
    real_drop = archive_mod._drop_epoch

    def crash_on_401(conn, epoch, fingerprint):
        if epoch == 401:
            raise RuntimeError("killed")
        return real_drop(conn, epoch, fingerprint)

    monkeypatch.setattr(archive_mod, "_drop_epoch", crash_on_401)
    with pytest.raises(RuntimeError, match="killed"):
        archive(loaded, 402, str(out))
    assert _epochs_in_db(loaded) == {401, 402}  # 400 dropped, 401 written but still here
    assert (out / epoch_file(401)).exists()
    monkeypatch.undo()

    summary = archive(loaded, 402, str(out))
    assert (summary.kept, summary.written, summary.dropped) == ([401], [], [401])  # the intact file is reused
    assert _epochs_in_db(loaded) == {402}
    assert archive(loaded, 402, str(out)).dropped == []  # nothing left to do
    for epoch in (400, 401):
        ingest(loaded, out / epoch_file(epoch), rules=True)
    assert _state(loaded) == before


def test_cli_archive(loaded, tmp_path):
    from indexer.cli import main

    assert main(["--database-url", loaded, "archive", "--before", "403", "--to", str(tmp_path / "c")]) == 2
    assert main(["--database-url", loaded, "archive", "--before", "401", "--to", str(tmp_path / "c")]) == 0
    assert _epochs_in_db(loaded) == {401, 402}
    assert (tmp_path / "c" / epoch_file(400)).exists()

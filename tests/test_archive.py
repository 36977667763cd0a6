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
from tests.support.helpers import ingest, table_snapshot, write_lines
from tests.support.partition_kit import EPOCHS

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


def _records(path) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


def _amend_a_finish(url: str, path, epoch: int, output_tokens: int) -> dict:
    """Load, through the loader, a changed copy of the epoch's first Finish (a new revision), as a poller would."""
    finish = next(r for r in _records(path) if r["kind"] == "finish")
    amended = finish | {"output_tokens": output_tokens}
    assert ingest(url, write_lines(path.with_name(f"amend-{epoch}-{output_tokens}.ndjson"), [amended])).amended == 1
    return amended


def _amending_writes(monkeypatch, url: str, epoch: int, times: int) -> tuple[list[int], list[dict]]:
    """Wrap archive's `_write_epoch` so that after each of its first `times` writes of `epoch` (the file written,
    not yet dropped) one of the epoch's records is amended; returns the epochs written, in order, and the amended
    records."""
    real_write, calls, amended = archive_mod._write_epoch, [], []

    def write_then_amend(conn, out, manifest, e):
        written = real_write(conn, out, manifest, e)
        calls.append(e)
        if e == epoch and calls.count(e) <= times:
            amended.append(_amend_a_finish(url, out / epoch_file(e), e, 10_000_000 + calls.count(e)))
        return written

    monkeypatch.setattr(archive_mod, "_write_epoch", write_then_amend)
    return calls, amended


def test_records_changed_between_file_and_drop_are_written_again(loaded, tmp_path, monkeypatch):
    out = tmp_path / "archive"
    calls, amended = _amending_writes(monkeypatch, loaded, 400, times=1)
    summary = archive(loaded, 402, str(out))
    assert calls == [400, 400, 401]  # the drop refused the stale file once; the second write held
    assert (summary.written, summary.dropped) == ([400, 401], [400, 401])
    assert _epochs_in_db(loaded) == {402}
    # the file has the amended record in place of the one first written, and the manifest describes that file
    finishes = [r for r in _records(out / epoch_file(400)) if r["kind"] == "finish"]
    key = (amended[0]["escrow_id"], amended[0]["inference_id"])
    assert [r for r in finishes if (r["escrow_id"], r["inference_id"]) == key] == amended
    entry = json.loads((out / "manifest.json").read_text())["epochs"]["400"]
    assert hashlib.sha256((out / epoch_file(400)).read_bytes()).hexdigest() == entry["sha256"]
    assert entry["records"]["finish"] == len(finishes)


def test_records_changing_at_every_attempt_stop_the_archive_before_any_drop(loaded, tmp_path, monkeypatch):
    calls, amended = _amending_writes(monkeypatch, loaded, 400, times=archive_mod.RETRIES)
    with pytest.raises(RuntimeError, match=rf"epoch 400: .*\({archive_mod.RETRIES} attempts\)"):
        archive(loaded, 402, str(tmp_path / "archive"))
    assert calls == [400] * archive_mod.RETRIES and len(amended) == archive_mod.RETRIES
    assert _epochs_in_db(loaded) == set(EPOCHS)  # nothing dropped: not 400, and 401 never reached
    with psycopg.connect(loaded) as c:
        assert c.execute("SELECT to_regclass('part.rec_finish_tx_e400') IS NOT NULL").fetchone() == (True,)
        assert c.execute("SELECT max(output_tokens) FROM rec.finish_tx WHERE epoch_index = 400").fetchone() == (
            10_000_000 + archive_mod.RETRIES,)


def _finish_row(url: str, finish: dict) -> tuple:
    with psycopg.connect(url) as c:
        return c.execute("SELECT output_tokens, revision FROM rec.finish_tx WHERE escrow_id = %s AND inference_id = %s",
                         (str(finish["escrow_id"]), finish["inference_id"])).fetchone()


@pytest.mark.parametrize("restored_first", [True, False], ids=["restored-then-amended", "amended-while-archived"])
def test_a_restore_never_puts_back_a_record_older_than_the_stored_one(loaded, tmp_path, capsys, restored_first):
    """A Finish amended after the archive was written (after a first restore, or while its epoch was out of the
    database) is newer than the archived one: restoring the archive keeps it, and says which line it did not apply
    (a quarantine row with the reason, a warning naming file and line); the rest restores, exit 0."""
    from indexer.cli import main

    out = tmp_path / "archive"
    archive(loaded, 401, str(out))
    path = out / epoch_file(400)
    restore = ["--database-url", loaded, "ingest", "--no-progress", str(path)]
    if restored_first:
        assert main(restore) == 0
        amended = _amend_a_finish(loaded, path, 400, 7)
        assert _finish_row(loaded, amended) == (7, 2)
    else:
        finish = next(r for r in _records(path) if r["kind"] == "finish")
        amended = finish | {"output_tokens": 7}
        assert ingest(loaded, write_lines(tmp_path / "late.ndjson", [amended])).loaded == 1
    capsys.readouterr()
    assert main(restore) == 0
    assert _finish_row(loaded, amended)[0] == 7  # not reverted
    line = next(n for n, r in enumerate(_records(path), 1) if r["kind"] == "finish")
    err = capsys.readouterr().err
    assert "1 archived record(s) not restored" in err and f"{epoch_file(400)}:{line}:" in err
    with psycopg.connect(loaded) as c:
        reason, resolved = c.execute("SELECT reason, resolved_at FROM api.quarantine WHERE source LIKE %s",
                                     (f"%{epoch_file(400)}",)).fetchone()
        assert reason.startswith(f"archived finish [\"{amended['escrow_id']}\", {amended['inference_id']}] is older "
                                 "than the stored record (revision") and resolved is None
        assert c.execute("SELECT count(*) FROM rec.escrow WHERE epoch_index = 400").fetchone()[0] > 0  # the rest

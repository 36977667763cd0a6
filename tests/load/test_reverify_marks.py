"""Which epoch-level records re-mark an epoch's escrows for the replay (and so for verification): a change to what
verification reads (devshard_escrow_params, warm-key grants) does; a new params_height or new live values do not."""
from __future__ import annotations

from indexer.load.ingest import ingest_paths
from tests.support.helpers import escrow, ingest, write_lines

EPOCH = 408
ESCROW_PARAMS = {"approved_versions": [{"name": "v5"}], "max_nonce": 1000}


def params(height: int, escrow_params=ESCROW_PARAMS, p0="0.1") -> dict:
    return {"kind": "epoch_params", "epoch_index": EPOCH, "validation_params": {"binom_test_p0": p0},
            "devshard_escrow_params": escrow_params, "params_height": height, "params_exact": False}


def grant(grantee: str, pub_key: str | None = None) -> dict:
    return {"kind": "warm_key", "epoch_index": EPOCH, "participant": "gonka1hostA", "grantee": grantee,
            "pub_key": pub_key}


def marked_after(db_url, conn, tmp_path, name: str, recs: list[dict]) -> list[str]:
    """Load ``recs`` without replaying and return the escrows then marked dirty (the marks are cleared after)."""
    ingest_paths(db_url, [str(write_lines(tmp_path / name, recs))])
    got = [r[0] for r in conn.execute("SELECT escrow_id FROM replay.dirty_escrow ORDER BY 1")]
    conn.execute("DELETE FROM replay.dirty_escrow")
    conn.commit()
    return got


def test_epoch_params_re_mark_escrows_only_when_the_escrow_params_change(db_url, conn, tmp_path):
    ingest(db_url, write_lines(tmp_path / "base.ndjson", [escrow("1971", epoch=EPOCH), escrow("1972", epoch=EPOCH),
                                                          params(100)]))
    assert conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone()[0] == 0
    # a later cycle's capture of the open epoch: a new height and new live values, the same escrow params
    assert marked_after(db_url, conn, tmp_path, "live.ndjson", [params(101, p0="0.2")]) == []
    assert conn.execute("SELECT params_height FROM rec.epoch_params WHERE epoch_index = %s",
                        (EPOCH,)).fetchone()[0] == 101  # stored all the same
    changed = {**ESCROW_PARAMS, "max_nonce": 2000}
    assert marked_after(db_url, conn, tmp_path, "gov.ndjson", [params(102, changed)]) == ["1971", "1972"]
    assert marked_after(db_url, conn, tmp_path, "gone.ndjson", [params(103, None)]) == ["1971", "1972"]
    assert marked_after(db_url, conn, tmp_path, "back.ndjson", [params(104, changed)]) == ["1971", "1972"]


def test_a_new_epoch_params_record_marks_its_escrows(db_url, conn, tmp_path):
    ingest(db_url, write_lines(tmp_path / "base.ndjson", [escrow("1971", epoch=EPOCH)]))
    assert marked_after(db_url, conn, tmp_path, "new.ndjson", [params(100)]) == ["1971"]


def test_a_warm_key_change_still_re_marks_the_epoch(db_url, conn, tmp_path):
    ingest(db_url, write_lines(tmp_path / "base.ndjson", [escrow("1971", epoch=EPOCH), params(100),
                                                          grant("gonka1warm")]))
    assert marked_after(db_url, conn, tmp_path, "same.ndjson", [grant("gonka1warm")]) == []
    assert marked_after(db_url, conn, tmp_path, "key.ndjson", [grant("gonka1warm", "A" * 44)]) == ["1971"]
    assert marked_after(db_url, conn, tmp_path, "more.ndjson", [grant("gonka1other")]) == ["1971"]


def test_the_epoch_record_re_marks_only_when_the_epoch_ends(db_url, conn, tmp_path):
    """Verification reads whether the epoch ended (live params stop standing in for its own then)."""
    open_epoch = {"kind": "epoch", "epoch_index": EPOCH, "start_height": 100}
    ingest(db_url, write_lines(tmp_path / "base.ndjson", [open_epoch, escrow("1971", epoch=EPOCH), params(100)]))
    seen = {**open_epoch, "observed_at": "2026-12-05T00:00:00Z"}
    assert marked_after(db_url, conn, tmp_path, "seen.ndjson", [seen]) == []
    assert marked_after(db_url, conn, tmp_path, "ended.ndjson", [{**open_epoch, "end_height": 900}]) == ["1971"]
    assert marked_after(db_url, conn, tmp_path, "exact.ndjson", [{**params(900), "params_exact": True}]) == ["1971"]

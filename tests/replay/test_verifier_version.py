"""The verifier's identity (indexer.replay.verifier): a hand-raised version pinned to a hash of the checks' source,
so rows are re-checked only by a newer verifier, and crashed rows are retried a bounded number of times."""
from __future__ import annotations

import pytest

from indexer.replay import verifier as vr
from tests.support.helpers import ingest, write_lines
from tests.support.verify_records import EID, records

# every version with the source digest it was released with: a change to the checks' source fails the first test
# until VERIFIER_VERSION is raised and the new digest pinned under it (never by re-pinning an old version)
PINNED = {1: "3653d50da1ea4091", 2: "d784ee65f68d39b7", 3: "55d5a8e8228f2ce9", 4: "cb689957795824f7"}


def test_the_version_is_raised_with_every_change_to_the_checks_source():
    assert vr.VERIFIER_VERSION == max(PINNED), "pin the new version's source digest in PINNED"
    assert vr.SOURCE_DIGEST == PINNED[vr.VERIFIER_VERSION], (
        f"the checks' source changed (digest {vr.SOURCE_DIGEST}): raise VERIFIER_VERSION and pin the digest under "
        f"the new version")
    assert len(set(PINNED.values())) == len(PINNED)


def test_the_identity_covers_the_wire_code_that_decides_the_signed_bytes(tmp_path, monkeypatch):
    before = vr.source_digest()
    copy = tmp_path / "indexer"
    (copy / "wire").mkdir(parents=True)
    (copy / "wire" / "diffs.py").write_bytes(vr._WIRE[0].read_bytes() + b"\n# changed\n")
    monkeypatch.setattr(vr, "_WIRE", [copy / "wire" / "diffs.py"])
    assert vr.source_digest() != before


def test_identities_of_lower_versions_and_of_the_older_format_sort_below_the_floor():
    floor = vr.version_floor(7)
    older = ["verification c44bc0a9604caf25; session rules v4.1", vr.identity(6, "ffff"), vr.identity(0, "0")]
    same_or_newer = [vr.identity(7, "0000"), vr.identity(7, "ffff"), vr.identity(8, "0"), vr.identity(10, "0")]
    assert all(vr.is_older(i, 7) for i in [None, *older])
    assert not any(vr.is_older(i, 7) for i in same_or_newer)
    assert all(i < floor for i in older) and all(i > floor for i in same_or_newer)
    with pytest.raises(ValueError, match="verifier version 1000000 outside 0 .. 999999"):
        vr.version_floor(10**6)  # six digits keep the order of the text the order of the numbers


def _load(db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "in.ndjson", records()))


def _row(conn) -> dict:
    cur = conn.execute("SELECT * FROM replay.escrow_verification WHERE escrow_id = %s", (EID,))
    return dict(zip([c.name for c in cur.description], cur.fetchone()))


def test_the_database_orders_identities_as_python_does(conn):
    """The stale selection compares in SQL with the database's collation."""
    idents = ["verification c44bc0a9604caf25; session rules v4.1", vr.identity(6, "ffff"), vr.identity(7, "0000"),
              vr.identity(7, "ffff"), vr.identity(10, "0")]
    below = conn.execute("SELECT array_agg(i ORDER BY i) FROM unnest(%s::text[]) i WHERE i < %s",
                         (idents, vr.version_floor(7))).fetchone()[0]
    assert below == idents[:2]


def test_a_row_of_a_newer_verifier_is_neither_marked_nor_rechecked_by_older_code(db_url, conn, tmp_path):
    """`indexer run` on older code beside `indexer ingest` on newer code: the older process leaves the newer rows
    alone (it marks only lower versions, and an escrow replayed for another reason keeps a newer row whose evidence
    did not change), so the two do not re-mark each other's rows for ever."""
    from indexer.replay.run import mark_all_dirty, replay_dirty

    _load(db_url, tmp_path)
    newer = vr.identity(vr.VERIFIER_VERSION + 1, "0123456789abcdef")
    conn.execute("UPDATE replay.escrow_verification SET verifier = %s", (newer,))
    assert vr.mark_stale_verifications(conn) == 0
    mark_all_dirty(conn)
    assert replay_dirty(conn).verified == 0 and _row(conn)["verifier"] == newer
    # the newer process marks the older one's rows
    assert vr.mark_stale_verifications(conn, vr.VERIFIER_VERSION + 2) == 1


def _backoff_elapsed(conn) -> None:
    """The crashed row's wait as if it had passed (the delays are minutes)."""
    conn.execute("UPDATE replay.escrow_verification SET retry_after = now() - interval '1 second' "
                 "WHERE retry_after IS NOT NULL")


def _wait_seconds(conn) -> float | None:
    return conn.execute("SELECT extract(epoch FROM retry_after - verified_at) FROM replay.escrow_verification "
                        "WHERE escrow_id = %s", (EID,)).fetchone()[0]


def test_a_crashed_row_is_retried_a_bounded_number_of_times_then_stays_failed(db_url, conn, tmp_path, monkeypatch):
    from indexer.replay import verification as stage
    from indexer.replay.run import replay_dirty

    real = stage.verify_bundle

    def broken(bundle, recoveries=None, seen=None):
        raise MemoryError("no room")

    monkeypatch.setattr(stage, "verify_bundle", broken)
    _load(db_url, tmp_path)
    assert (_row(conn)["crashes"], _row(conn)["evidence_digest"]) == (1, None)
    for n in range(2, vr.MAX_CRASHES + 1):  # the escrow is final: only the crash marks it again
        _backoff_elapsed(conn)
        assert replay_dirty(conn).verified == 1 and _row(conn)["crashes"] == n
    got = _row(conn)
    assert got["failure"] == (f"{stage.VERIFIER_FAILED}MemoryError: no room (crashed {vr.MAX_CRASHES} times in a "
                              f"row: not retried until its evidence or the verifier changes)")
    assert got["retry_after"] is None
    assert replay_dirty(conn).verified == 0  # no more retries; the warning alert stays
    # a transient crash: the next pass checks the row again and it passes
    conn.execute("UPDATE replay.escrow_verification SET crashes = 1")
    monkeypatch.setattr(stage, "verify_bundle", real)
    assert replay_dirty(conn).verified == 1
    got = _row(conn)
    assert (got["level"], got["failure"], got["crashes"]) == ("settled", None, 0) and got["evidence_digest"]
    assert (got["retry_after"], got["crash_digest"]) == (None, None)


def test_a_crashed_row_waits_a_doubling_delay_before_each_retry(db_url, conn, tmp_path, monkeypatch):
    """A verifier that raises on an escrow is not tried again on the next pass at once: it waits 5, 10, 20, 40
    minutes (stored in retry_after, shown by api.escrow_verification), also when the escrow is replayed for another
    reason with the same evidence."""
    from indexer.replay import verification as stage
    from indexer.replay.run import mark_all_dirty, replay_dirty

    monkeypatch.setattr(stage, "verify_bundle", lambda bundle, recoveries=None, seen=None: 1 / 0)
    _load(db_url, tmp_path)
    waits = [_wait_seconds(conn)]
    for n in range(2, vr.MAX_CRASHES):
        assert vr.mark_stale_verifications(conn) == 0  # not due: not marked
        mark_all_dirty(conn)
        assert replay_dirty(conn).verified == 0 and _row(conn)["crashes"] == n - 1  # same evidence: it waits
        _backoff_elapsed(conn)
        assert replay_dirty(conn).verified == 1 and _row(conn)["crashes"] == n
        waits.append(_wait_seconds(conn))
    assert waits == [300, 600, 1200, 2400][:vr.MAX_CRASHES - 1]
    shown = conn.execute("SELECT crashes, retry_after IS NOT NULL FROM api.escrow_verification WHERE escrow_id = %s",
                         (EID,)).fetchone()
    assert shown == (vr.MAX_CRASHES - 1, True)


def test_a_crashed_row_with_new_evidence_is_checked_at_once(db_url, conn, tmp_path, monkeypatch):
    from indexer.replay import verification as stage
    from indexer.replay.run import mark_all_dirty, replay_dirty

    monkeypatch.setattr(stage, "verify_bundle", lambda bundle, recoveries=None, seen=None: 1 / 0)
    _load(db_url, tmp_path)
    assert _row(conn)["crashes"] == 1 and _row(conn)["crash_digest"]
    conn.execute("UPDATE replay.escrow_verification SET crash_digest = 'other evidence'")
    mark_all_dirty(conn)
    assert replay_dirty(conn).verified == 1 and _row(conn)["crashes"] == 2


def test_the_retry_delays_double_and_stop_at_the_bound():
    assert [vr.retry_delay(n) for n in range(0, vr.MAX_CRASHES + 2)] == [None, 300, 600, 1200, 2400, None, None]

"""The verification stage's inputs, through the database: what a row's evidence digest covers, how served content is
read as the signed message, the session config's compiled defaults, the settlement's provenance and the warm-key
capture it relies on."""
from __future__ import annotations

from tests.support.helpers import ingest, write_lines
from tests.support.verify_kit import diff_content, script, user_sign, wire_tx
from tests.support.verify_records import EID, ROOTS, b64, records, signed_diff_records


def load(db_url, tmp_path, recs, name="in.ndjson"):
    return ingest(db_url, write_lines(tmp_path / name, recs))


def row(conn, eid=EID) -> dict:
    cur = conn.execute("SELECT * FROM replay.escrow_verification WHERE escrow_id = %s", (eid,))
    return dict(zip([c.name for c in cur.description], cur.fetchone()))


def _replace(recs: list[dict], kind: str, new: list[dict]) -> list[dict]:
    return [r for r in recs if r["kind"] != kind] + new


def test_an_amendment_of_only_the_stored_root_checks_the_escrow_again(db_url, conn, tmp_path):
    load(db_url, tmp_path, records())
    before = row(conn)
    amended = {**signed_diff_records()[0], "post_state_root": "ab" * 32}
    load(db_url, tmp_path, [amended], "amended.ndjson")
    after = row(conn)
    assert after["evidence_digest"] != before["evidence_digest"]
    # the content carries its own root, so the stored one changes nothing the checks read
    assert (after["level"], after["failed_check"]) == ("settled", None)


def test_content_with_escrow_id_but_no_root_is_read_as_the_signed_message(db_url, conn, tmp_path):
    """Served content carrying field 3 but not field 4 is the whole message (the poller's test,
    indexer.wire.diffs.signs_whole): the signature covers it as served, nothing is appended."""
    diffs = signed_diff_records()
    txs = [wire_tx(t, EID) for t in script()[0]]
    content = diff_content(1, txs, b"", EID)  # nonce, txs, escrow_id: no post_state_root
    diffs[0] = {**diffs[0], "content": b64(content), "user_sig": user_sign(content).hex(),
                "post_state_root": ROOTS[1].hex()}
    load(db_url, tmp_path, _replace(records(), "signed_diff", diffs))
    got = row(conn)
    # the user signature holds; the replay then finds the content signs no root
    assert (got["failed_check"], got["failed_nonce"]) == ("replayed", 1), got["failure"]
    assert "the diff signs" in got["failure"]


def test_a_verifier_crash_keeps_no_digest_is_checked_again_and_alerts(db_url, conn, tmp_path, monkeypatch):
    from indexer.alerts.rules import load_rules, run_rule
    from indexer.replay import verification as stage
    from indexer.replay.run import mark_all_dirty, replay_dirty

    real = stage.verify_bundle

    def broken(bundle):
        raise IndexError("a verifier bug")

    monkeypatch.setattr(stage, "verify_bundle", broken)
    load(db_url, tmp_path, records())
    got = row(conn)
    assert got["evidence_digest"] is None and got["failure"] == f"{stage.VERIFIER_FAILED}IndexError: a verifier bug"
    rule = next(r for r in load_rules() if r.name == "escrow_verification_failed")
    [alert] = run_rule(conn, rule)
    assert alert.severity == "warning" and alert.summary == (
        f"escrow {EID} (epoch 272) could not be verified: the verifier failed: IndexError: a verifier bug")
    monkeypatch.setattr(stage, "verify_bundle", real)
    mark_all_dirty(conn)
    assert replay_dirty(conn).verified == 1  # no digest: checked again, though the evidence is the same
    got = row(conn)
    assert (got["level"], got["failure"]) == ("settled", None) and got["evidence_digest"] is not None
    assert run_rule(conn, rule) == []

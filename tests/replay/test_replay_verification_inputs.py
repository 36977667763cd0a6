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

    def broken(bundle, recoveries=None, seen=None):
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
    assert replay_dirty(conn).verified == 0  # the same evidence: it waits for its retry (retry_after)
    conn.execute("UPDATE replay.escrow_verification SET retry_after = now() - interval '1 second'")
    mark_all_dirty(conn)
    assert replay_dirty(conn).verified == 1  # no digest: checked again once due, though the evidence is the same
    got = row(conn)
    assert (got["level"], got["failure"]) == ("settled", None) and got["evidence_digest"] is not None
    assert run_rule(conn, rule) == []


def _warm_settlement(slot: int):
    """The fixture's records with slot ``slot``'s settlement signature made by another key (a warm key, or a
    forger's: only the grants tell), and that key's address."""
    import coincurve

    from indexer.verify.signatures import address_of_pubkey
    from tests.support.verify_kit import KEYS
    from tests.support.verify_records import settle_msg, settlement_record

    secret = coincurve.PrivateKey(b"\x09" * 32)
    msg = settle_msg(keys={**dict(enumerate(KEYS)), slot: secret})
    return _replace(records(), "settlement", [settlement_record(msg)]), \
        address_of_pubkey(secret.public_key.format(compressed=True))


def _grant(participant: str, grantee: str = "", exact: bool = True) -> dict:
    from tests.support.verify_records import EPOCH

    return {"kind": "warm_key", "epoch_index": EPOCH, "participant": participant, "grantee": grantee,
            "read_height": 900 if exact else None, "read_exact": exact}


def test_awaiting_grants_depends_on_the_slots_participants_only(db_url, conn, tmp_path):
    """Grants captured for someone outside the escrow's group leave it awaiting its own; once slot 0's participant
    is captured with no grants (an empty grantee), the unknown key is a failure."""
    from indexer.verify.evidence import COLD_ONLY
    from tests.support.verify_kit import HOSTS

    recs, forger = _warm_settlement(0)
    load(db_url, tmp_path, recs)
    assert (row(conn)["level"], row(conn)["failed_check"]) == ("replayed", None)
    outsider = "gonka1qyqszqgpqyqszqgpqyqszqgpqyqszqgpzxxq27"
    load(db_url, tmp_path, [_grant(outsider, HOSTS[1])], "outsider.ndjson")
    got = row(conn)
    assert (got["level"], got["failed_check"]) == ("replayed", None) and got["failure"].endswith(f"({COLD_ONLY})")
    load(db_url, tmp_path, [_grant(HOSTS[0])], "none.ndjson")  # read, and it granted nothing
    got = row(conn)
    assert (got["failed_check"], got["failed_nonce"]) == ("settled", 34), got["failure"]
    assert f"recovered {forger}" in got["failure"] and COLD_ONLY not in got["failure"]


def test_a_participant_whose_grants_were_not_read_is_awaited_beside_others_that_were(db_url, conn, tmp_path):
    """A partly failed capture: slot 1's participant has no row (its read failed) while the others were read; a
    signature of slot 1 by a key not granted by anyone read is not failed."""
    from indexer.verify.evidence import COLD_ONLY
    from tests.support.verify_kit import HOSTS

    recs, _ = _warm_settlement(1)
    others = [_grant(h, "gonka1qyqszqgpqyqszqgpqyqszqgpqyqszqgpzxxq27" if i == 0 else "")
              for i, h in enumerate(HOSTS) if i != 1]
    load(db_url, tmp_path, recs + others)
    got = row(conn)
    assert (got["level"], got["failed_check"]) == ("replayed", None) and got["failure"].endswith(f"({COLD_ONLY})")


def test_an_inexact_capture_neither_authorises_nor_refutes_a_key(db_url, conn, tmp_path):
    """Slot 0's participant was read from live values only (its end height pruned): today's grants do not list the
    key, but the epoch's might have: not checked, not failed."""
    from indexer.verify.evidence import INEXACT
    from tests.support.verify_kit import HOSTS

    recs, _ = _warm_settlement(0)
    load(db_url, tmp_path, recs + [_grant(HOSTS[0], exact=False)])
    got = row(conn)
    assert (got["level"], got["failed_check"]) == ("replayed", None) and got["failure"].endswith(f"({INEXACT})")


def test_a_failure_quoting_the_word_recovered_is_not_taken_for_an_unknown_key(db_url, conn, tmp_path):
    """Only a signature by an unknown key waits for grants: a settler text that happens to say "recovered", in an
    epoch with no grants captured, still fails the settled check."""
    from tests.support.verify_records import settle_msg, settlement_record

    msg = settle_msg()
    msg.settler = "recovered-gonka1"  # not bound by the host signatures, which cover the root, escrow and nonce
    load(db_url, tmp_path, _replace(records(), "settlement", [settlement_record(msg)]))
    got = row(conn)
    assert (got["level"], got["failed_check"]) == ("replayed", "settled"), got["failure"]
    assert "settler recovered-gonka1 is not the escrow creator" in got["failure"]


def test_a_settlement_read_over_rest_stops_at_replayed_saying_why(db_url, conn, tmp_path):
    from tests.support.verify_records import settlement_record

    rest = {**settlement_record(), "tx_raw": None, "msg_source": "rest: /cosmos/tx/v1beta1/txs re-encoded"}
    load(db_url, tmp_path, _replace(records(), "settlement", [rest]))
    got = row(conn)
    assert (got["level"], got["failed_check"], got["nonces_checked"]) == ("replayed", None, 34)
    assert got["failure"].startswith("settled not shown: the settlement was not read as broadcast (no raw "
                                     f"transaction binds its message to tx {rest['tx_hash']})")
    assert got["failure"].endswith("; read from: rest: /cosmos/tx/v1beta1/txs re-encoded")


def test_an_unreadable_settlement_fails_the_settled_check_with_its_stored_reason(db_url, conn, tmp_path):
    from tests.support.verify_records import settlement_record

    good = settlement_record()
    unreadable = {"kind": "settlement", "escrow_id": EID, "tx_hash": good["tx_hash"], "height": good["height"],
                  "msg": None, "tx_raw": good["tx_raw"],
                  "msg_unreadable": "the transaction carries 0 MsgSettleDevshardEscrow for escrow 124"}
    load(db_url, tmp_path, _replace(records(), "settlement", [unreadable]))
    got = row(conn)
    assert (got["level"], got["failed_check"], got["nonces_checked"]) == ("replayed", "settled", 34)
    assert got["failure"].endswith("carries no readable settlement: the transaction carries 0 "
                                   "MsgSettleDevshardEscrow for escrow 124"), got["failure"]
    assert "nonce 0" not in got["failure"]


def test_settlement_fields_not_captured_are_not_read_as_zero(db_url, conn, tmp_path):
    from tests.support.verify_records import settlement_record

    fields = {k: v for k, v in settlement_record(with_msg=False).items() if k not in ("nonce", "fees")}
    load(db_url, tmp_path, _replace(records(), "settlement", [fields]))
    got = row(conn)
    assert (got["level"], got["failed_check"], got["nonces_checked"]) == ("replayed", None, 34)
    assert got["failure"].endswith("no message bytes, and not captured: nonce, fees"), got["failure"]


def test_an_unusable_settlement_is_reported_after_the_log_is_checked(db_url, conn, tmp_path):
    """Stored settlement bytes that are not base64 fail the settled check, but the signed and replayed checks
    still run: the row says how far the log got."""
    from tests.support.verify_records import settlement_record

    load(db_url, tmp_path, _replace(records(), "settlement", [{**settlement_record(), "msg": "%%%"}]))
    got = row(conn)
    assert (got["level"], got["failed_check"], got["nonces_checked"]) == ("replayed", "settled", 34)
    assert got["failure"] == f"rec.settlement escrow {EID}: msg is not base64"


def test_a_zero_seal_grace_is_not_checked_rather_than_replayed_as_zero(db_url, conn, tmp_path):
    from tests.support.verify_records import escrow_record

    load(db_url, tmp_path, _replace(records(), "escrow", [escrow_record(inference_seal_grace_nonces=0)]))
    got = row(conn)
    assert (got["level"], got["failed_check"], got["nonces_checked"]) == ("signed", None, 34), got["failure"]
    assert got["failure"].startswith("not checkable by this verifier: the session's inference_seal_grace_nonces "
                                     "is 0")


def test_rows_of_another_verifier_are_checked_again_at_the_next_pass(db_url, conn, tmp_path):
    """Each row names the verifier that wrote it (its version and a hash of the checks' source); a replay pass first
    marks the escrows whose row a lower version wrote, final ones included, and nothing else."""
    from indexer.replay.run import replay_dirty
    from indexer.replay.verifier import VERIFIER

    load(db_url, tmp_path, records())
    assert row(conn)["verifier"] == VERIFIER and VERIFIER.startswith("verifier ")
    assert replay_dirty(conn).verified == 0  # nothing stale, nothing dirty
    conn.execute("UPDATE replay.escrow_verification SET verifier = 'verification 0; session rules v4.1'")
    assert replay_dirty(conn).verified == 1
    got = row(conn)
    assert (got["verifier"], got["level"]) == (VERIFIER, "settled")
    conn.execute("UPDATE replay.escrow_verification SET verifier = NULL")  # written before the column existed
    assert replay_dirty(conn).verified == 1 and row(conn)["verifier"] == VERIFIER

"""The tx records the replay reads are compared with the txs of the escrow's verified signed log: a record whose
fields differ, a record of a tx the log does not have and a tx of the log with no record each bring the escrow's
level to none with failed_check ``records``, the first contradicting nonce and what differs; records that agree
keep the log's level. The v4.1 release fixture (tests/support/verify_records.py) reaches ``settled`` untouched."""
from __future__ import annotations

import pytest

from indexer.replay.bundling import NO_LOG
from indexer.replay.run import replay_dirty
from tests.support.helpers import ingest, write_lines
from tests.support.verify_kit import diff_content, script, user_sign
from tests.support.verify_records import (EID, ROOTS, SOURCE, TAMPERS, b64, escrow_record, records, tampered,
                                          tx_records)

PROMPT = next(r for r in tx_records() if r["kind"] == "start" and r["inference_id"] == 14)["prompt_hash"]


def load(db_url, tmp_path, recs, name="in.ndjson"):
    ingest(db_url, write_lines(tmp_path / name, recs))


def row(conn) -> tuple:
    return conn.execute("SELECT level, failed_check, failed_nonce, failure FROM api.escrow_verification "
                        "WHERE escrow_id = %s", (EID,)).fetchone()


def _is(rec: dict, kind: str, inference_id: int, slot: int | None) -> bool:
    return (rec["kind"] == kind and rec.get("inference_id") == inference_id
            and slot in (None, rec.get("validator_slot", rec.get("voter_slot"))))


def edited(kind: str, inference_id: int, slot: int | None = None, base: list[dict] | None = None, **changes):
    """The fixture's records with the one tx record of (kind, inference_id[, slot]) changed."""
    recs = records() if base is None else base
    assert sum(_is(r, kind, inference_id, slot) for r in recs) == 1
    return [dict(r, **changes) if _is(r, kind, inference_id, slot) else r for r in recs]


# tamper -> (records, the failed nonce, a fragment of the failure)
FLIPPED = {
    "start max_tokens": (dict(kind="start", inference_id=14, max_tokens=2000), 14,
                         "the start record of inference 14 says max_tokens 2000, the signed diff at nonce 14 says"),
    "start prompt_hash cut to 10 characters": (dict(kind="start", inference_id=14, prompt_hash=PROMPT[:10]), 14,
                                               f"says prompt_hash '{PROMPT[:10]}'"),
    "confirm_start confirmed_at": (dict(kind="confirm_start", inference_id=4, confirmed_at=1), 5,
                                   "the confirm_start record of inference 4 says confirmed_at 1"),
    "finish output_tokens": (dict(kind="finish", inference_id=22, output_tokens=0), 24,
                             "the finish record of inference 22 says output_tokens 0"),
    "finish executor_slot": (dict(kind="finish", inference_id=8, executor_slot=2), 10,
                             "the finish record of inference 8 says executor_slot 2, the signed diff at nonce 10 "
                             "says 3"),
    "validation valid": (dict(kind="validation", inference_id=8, slot=4, valid=True), 11,
                         "the validation record of inference 8 slot 4 says valid true, the signed diff at nonce 11 "
                         "says false"),
    "validation_vote vote_valid": (dict(kind="validation_vote", inference_id=14, slot=1, vote_valid=True), 18,
                                   "the validation_vote record of inference 14 slot 1 says vote_valid true"),
    "timeout reason": (dict(kind="timeout", inference_id=19, reason="refused"), 21,
                       "the timeout record of inference 19 says reason 'refused', the signed diff at nonce 21 says "
                       "'execution'"),
    "timeout votes": (dict(kind="timeout", inference_id=19, votes=[{"voter_slot": 0, "accept": True}]), 21,
                      "the timeout record of inference 19 says votes [slot 0 accept]"),
    "record moved to another nonce": (dict(kind="validation", inference_id=8, slot=4, diff_nonce=12), 11,
                                      "says nonce 12, the signed log has it at nonce 11"),
    "wrong tx_index": (dict(kind="finish", inference_id=1, tx_index=1), 3, "says tx 1 of nonce 3, the signed diff "
                                                                         "has it as tx 0"),
}


def test_the_fixture_with_records_stating_their_tx_index_stays_settled(db_url, conn, tmp_path):
    index = {(n, t["kind"], t.get("inference_id")): i for n, txs in enumerate(script(), 1) for i, t in enumerate(txs)}
    recs = [dict(r, tx_index=index[(r["diff_nonce"], r["kind"], r["inference_id"])]) if "diff_nonce" in r else r
            for r in records()]
    load(db_url, tmp_path, recs)
    assert row(conn) == ("settled", None, None, None)


@pytest.mark.parametrize("tamper", sorted(FLIPPED))
def test_a_record_whose_fields_the_signed_log_contradicts_gives_level_none(db_url, conn, tmp_path, tamper):
    change, nonce, fragment = FLIPPED[tamper]
    change = dict(change)
    load(db_url, tmp_path, edited(change.pop("kind"), change.pop("inference_id"), change.pop("slot", None),
                                  **change))
    level, check, failed_nonce, failure = row(conn)
    assert (level, check, failed_nonce) == ("none", "records", nonce), failure
    assert failure.startswith("the tx records are not the signed log's txs: ") and fragment in failure, failure
    assert failure.endswith("(the signed log alone reaches settled)"), failure


def test_a_dropped_record_gives_level_none(db_url, conn, tmp_path):
    recs = [r for r in records() if not _is(r, "validation_vote", 8, 1)]
    load(db_url, tmp_path, recs)
    level, check, nonce, failure = row(conn)
    assert (level, check, nonce) == ("none", "records", 13)
    assert ("the signed diff at nonce 13 has tx 0, whose validation_vote record of inference 8 slot 1 is not stored"
            in failure), failure


def test_an_extra_record_gives_level_none(db_url, conn, tmp_path):
    extra = {"kind": "validation", "escrow_id": EID, "inference_id": 8, "validator_slot": 2, "diff_nonce": 11,
             "valid": True}
    load(db_url, tmp_path, [*records(), extra])
    level, check, nonce, failure = row(conn)
    assert (level, check, nonce) == ("none", "records", 11)
    assert "the validation record of inference 8 slot 2 (nonce 11) is not a tx of the signed log" in failure, failure


def test_several_disagreements_name_the_first_and_count_the_rest(db_url, conn, tmp_path):
    recs = edited("finish", 22, output_tokens=0, base=edited("confirm_start", 4, confirmed_at=1))
    load(db_url, tmp_path, recs)
    level, check, nonce, failure = row(conn)
    assert (level, check, nonce) == ("none", "records", 5)
    assert "confirmed_at 1" in failure and "(1 more disagreements)" in failure, failure


def test_a_record_changed_after_verification_is_compared_again(db_url, conn, tmp_path):
    load(db_url, tmp_path, records())
    assert row(conn)[:2] == ("settled", None)
    original = next(r for r in records() if _is(r, "validation", 8, 4))
    load(db_url, tmp_path, [dict(original, valid=True)], "tampered.ndjson")
    assert row(conn)[:3] == ("none", "records", 11)
    load(db_url, tmp_path, [original], "restored.ndjson")
    assert row(conn) == ("settled", None, None, None)
    assert replay_dirty(conn).verified == 0  # nothing changed since: not checked again


def test_records_are_compared_with_the_log_up_to_where_the_replay_stopped(db_url, conn, tmp_path):
    """A log the replay refuses at nonce 8 (the user signed an altered start over the old root) is the user's up to
    there: a record before nonce 8 that contradicts it gives none; records from nonce 8 on are not compared, the
    row says the replay stopped there."""
    check, nonce, fragment = TAMPERS["fork signed by the user"]
    fork = tampered("fork signed by the user")
    load(db_url, tmp_path, edited("start", 14, max_tokens=7, base=fork))
    level, failed_check, failed_nonce, failure = row(conn)
    assert (level, failed_check, failed_nonce) == ("signed", check, nonce) and fragment in failure, failure
    load(db_url, tmp_path, edited("finish", 1, input_tokens=1, base=fork), "early.ndjson")
    level, failed_check, failed_nonce, failure = row(conn)
    assert (level, failed_check, failed_nonce) == ("none", "records", 3), failure
    assert "(the signed log alone reaches signed: " in failure and fragment in failure, failure


def _unported(recs: list[dict]) -> list[dict]:
    return [escrow_record(protocol_version="v3") if r["kind"] == "escrow" else r for r in recs]


def test_without_a_replay_every_signed_diff_is_decoded_for_the_comparison(db_url, conn, tmp_path):
    """v3's session rules are not ported: the log stops at signed, and its txs are still the records' reference."""
    load(db_url, tmp_path, _unported(records()))
    level, check, _, failure = row(conn)
    assert (level, check) == ("signed", None) and "not ported" in failure
    load(db_url, tmp_path, _unported(edited("validation_vote", 8, 0, vote_valid=False)), "tampered.ndjson")
    level, check, nonce, failure = row(conn)
    assert (level, check, nonce) == ("none", "records", 12), failure


def test_a_signed_diff_that_cannot_be_decoded_leaves_the_records_not_compared_and_says_so(db_url, conn, tmp_path):
    content = diff_content(25, [b"\x08\x01"], ROOTS[25], EID)  # a DevshardTx that is a bare varint
    odd = {"kind": "signed_diff", "escrow_id": EID, "nonce": 25, "content": b64(content),
           "user_sig": user_sign(content).hex(), "source_host": SOURCE}
    recs = [odd if r["kind"] == "signed_diff" and r["nonce"] == 25 else r for r in _unported(records())]
    load(db_url, tmp_path, recs)
    level, check, _, failure = row(conn)
    assert (level, check) == ("signed", None)
    assert ("tx records not compared with the signed log: signed diff 25: nonce 25 tx 0: a DevshardTx holds exactly "
            "one member" in failure), failure


def test_an_escrow_without_a_signed_log_keeps_its_row_and_its_records_stay_out_of_the_digest(db_url, conn,
                                                                                            tmp_path):
    """Nothing to compare the records with: the row says no log, and a changed record does not check it again."""
    load(db_url, tmp_path, [r for r in records() if r["kind"] != "signed_diff"])
    before = conn.execute("SELECT level, failed_check, failure, evidence_digest, verified_at "
                          "FROM replay.escrow_verification WHERE escrow_id = %s", (EID,)).fetchone()
    assert before[:3] == ("none", None, NO_LOG)
    load(db_url, tmp_path, [next(dict(r, valid=True) for r in records() if _is(r, "validation", 8, 4))], "t.ndjson")
    after = conn.execute("SELECT level, failed_check, failure, evidence_digest, verified_at "
                         "FROM replay.escrow_verification WHERE escrow_id = %s", (EID,)).fetchone()
    assert after == before

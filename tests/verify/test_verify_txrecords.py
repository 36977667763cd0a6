"""The comparison of stored tx records with a signed log's txs (indexer.verify.txrecords), without a database."""
from __future__ import annotations

from indexer.verify import txrecords as txr


def validation(nonce: int, index: int, valid: bool, slot: int = 2) -> dict:
    return {"kind": "validation", "inference_id": 5, "validator_slot": slot, "valid": valid, "escrow_id": "1",
            "signer": "gonka1x", "tx_index": index}


def record(nonce: int, valid: bool, index: int | None = None, slot: int = 2) -> txr.Entry:
    return txr.record_entry("validation", 5, slot, nonce, index, (valid,))


def test_a_record_agrees_with_any_repeat_of_its_key_in_the_log():
    """The protocol ignores a second validation by one slot; the table holds one row of the key: either is the log's."""
    log = [txr.log_entry(7, validation(7, 0, True)), txr.log_entry(9, validation(9, 1, False))]
    assert txr.contradictions(log, [record(7, True)]) == []
    assert txr.contradictions(log, [record(9, False, 1)]) == []
    [found] = txr.contradictions(log, [record(9, True)])
    assert found == txr.Contradiction(9, "the validation record of inference 5 slot 2 says valid true, the signed "
                                         "diff at nonce 9 says false")


def test_a_record_without_a_tx_index_is_compared_without_it_and_a_stated_one_must_match():
    log = [txr.log_entry(7, validation(7, 3, True))]
    assert txr.contradictions(log, [record(7, True)]) == []
    [found] = txr.contradictions(log, [record(7, True, 0)])
    assert found.reason.endswith("says tx 0 of nonce 7, the signed diff has it as tx 3")


def test_missing_and_extra_records_both_count_and_come_in_nonce_order():
    log = [txr.log_entry(7, validation(7, 0, True)), txr.log_entry(8, validation(8, 0, True, slot=3))]
    found = txr.contradictions(log, [record(7, True), record(4, True, slot=1)])
    assert [(c.nonce, c.reason) for c in found] == [
        (4, "the validation record of inference 5 slot 1 (nonce 4) is not a tx of the signed log"),
        (8, "the signed diff at nonce 8 has tx 0, whose validation record of inference 5 slot 3 is not stored")]


def test_records_from_the_nonce_the_replay_stopped_at_are_not_compared():
    log = [txr.log_entry(7, validation(7, 0, True))]
    assert txr.contradictions(log, [record(7, True), record(9, False, slot=4)], below=9) == []
    assert len(txr.contradictions(log, [record(7, True), record(9, False, slot=4)])) == 1


def test_txs_that_make_no_record_are_left_out_and_empty_bytes_are_null():
    assert txr.log_entry(3, {"kind": "heartbeat", "tx_index": 0}) is None
    assert txr.log_entry(3, {"kind": "timeout", "inference_id": 1, "reason": 0, "votes": [], "tx_index": 0}) is None
    start = {"kind": "start", "inference_id": 3, "prompt_hash": b"", "model": "", "input_length": 0, "max_tokens": 0,
             "started_at": 0, "tx_index": 0}
    entry = txr.log_entry(3, start)
    assert entry.fields == (None, None, 0, 0, 0)
    assert txr.contradictions([entry], [txr.record_entry("start", 3, None, 3, 0, ("", None, 0, 0, 0))]) == []
    [found] = txr.contradictions([entry], [txr.record_entry("start", 3, None, 3, 0, (None, None, None, 0, 0))])
    assert "says input_length null, the signed diff at nonce 3 says 0" in found.reason  # null is not zero

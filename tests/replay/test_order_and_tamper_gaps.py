"""Order and tamper gaps, each now guarded by its test: a tx record the signed log contradicts is no longer believed
at the escrow's verification level (tests/replay/test_tx_records_vs_log.py covers every tamper kind), a rules claim
cancelled as a deadlock victim inside a rules statement is claimed again, and two tx records of one key (a repeated
tx in a log) give the same answer in either load order (indexer.load.samekey). All use the v4.1 release fixture
(tests/support/verify_records.py), which reaches ``settled`` untouched."""
from __future__ import annotations

import logging

import psycopg

from indexer.rules.run import run_rules
from tests.support.helpers import ingest, write_lines
from tests.support.locks import Background, fixture_with_its_epoch_dirty, never_the_victim, the_victim, waits_on_a_lock
from tests.support.verify_records import EID, records

INFERENCE_COLUMNS = ("inference_id, status, input_tokens, output_tokens, votes_valid, votes_invalid, penalty, "
                     "status_nonce")


def level(conn) -> tuple:
    return conn.execute("SELECT level, failed_check FROM api.escrow_verification WHERE escrow_id = %s",
                        (EID,)).fetchone()


def inferences(url) -> list[tuple]:
    with psycopg.connect(url) as c:
        return c.execute(f"SELECT {INFERENCE_COLUMNS} FROM api.inferences WHERE escrow_id = %s ORDER BY 1",
                         (EID,)).fetchall()


def test_the_untouched_fixture_is_settled(db_url, conn, tmp_path):
    ingest(db_url, write_lines(tmp_path / "in.ndjson", records()))
    assert level(conn) == ("settled", None)


def test_a_tx_record_the_signed_log_contradicts_does_not_stay_settled(db_url, conn, tmp_path):
    recs = [dict(r, input_tokens=r["input_tokens"] + 1) if r["kind"] == "finish" and r["inference_id"] == 1 else r
            for r in records()]
    ingest(db_url, write_lines(tmp_path / "in.ndjson", recs))
    # the altered count is what the api shows ...
    assert conn.execute("SELECT input_tokens FROM api.inferences WHERE escrow_id = %s AND inference_id = 1",
                        (EID,)).fetchone()[0] == next(r["input_tokens"] for r in recs
                                                       if r["kind"] == "finish" and r["inference_id"] == 1)
    # ... so the level of the evidence behind it must not be the one of the signed log it contradicts
    assert level(conn)[0] != "settled"


def test_a_repeated_validation_gives_the_same_answer_in_either_order(db_url, second_db_url, tmp_path):
    base = records()
    first = next(r for r in base if r["kind"] == "validation" and r["inference_id"] == 4)
    repeat = dict(first, diff_nonce=first["diff_nonce"] + 1, valid=not first["valid"])
    ingest(db_url, write_lines(tmp_path / "log_order.ndjson", [*base, repeat]))
    ingest(second_db_url, write_lines(tmp_path / "reversed.ndjson", [repeat, *base]))
    assert inferences(db_url) == inferences(second_db_url)


def test_a_rules_claim_cancelled_as_a_deadlock_victim_is_claimed_again(db_url, tmp_path, caplog):
    """A deadlock inside a rules statement reaches the claim's retry as what it is: the claim is rolled back whole,
    claimed again, and the epoch evaluated. Deterministic: the claim is the side that closes the cycle, with the
    short deadlock_timeout (tests/support/locks.py)."""
    fixture_with_its_epoch_dirty(db_url, tmp_path)
    gate, other, claimer = (psycopg.connect(db_url) for _ in range(3))
    never_the_victim(other)
    the_victim(claimer)
    # the other side holds what sql/rules/10_limits.sql rewrites; the gate stops the claim before that file, after
    # it has locked the partitioned parents and claimed the epoch
    other.execute("LOCK TABLE rules.model_limit IN SHARE MODE")
    gate.execute("LOCK TABLE rules.escrow_limit IN ACCESS EXCLUSIVE MODE")
    try:
        claim = Background(lambda: run_rules(claimer))
        waits_on_a_lock(db_url, claimer.info.backend_pid)
        # the other side now waits for a table the claim holds, then the claim (let through) for the other side
        wants = Background(lambda: other.execute("LOCK TABLE rules.challenge IN SHARE MODE"))
        waits_on_a_lock(db_url, other.info.backend_pid)
        with caplog.at_level(logging.WARNING, logger="indexer.db.deadlocks"):
            gate.rollback()
            wants.result()  # the claim was cancelled (its locks went with it): the other side has its lock
            other.rollback()  # the claim's second try waited for it
            summary = claim.result()
    finally:
        for c in (gate, other, claimer):
            c.close()
    assert summary.epochs == 1
    assert [r.getMessage() for r in caplog.records] == [
        "rules claim: cancelled as a deadlock victim (in sql/rules/10_limits.sql), trying again (2 of 5)"]

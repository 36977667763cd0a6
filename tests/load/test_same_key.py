"""Two records of one key give the same rows in any load order (indexer.load.samekey): of two txs of a key at
different diff_nonces the lower one is stored and the other quarantined, within a batch, across batches and across
commands; a later record that leaves optional fields out keeps the stored values; and a record naming a slot its
escrow does not have is quarantined whether the escrow is loaded before or after it (indexer.load.slots)."""
from __future__ import annotations

import json

import psycopg
import pytest

from indexer.load.ingest import ingest_paths
from tests.support.helpers import escrow, ingest, table_snapshot, tx, write_lines

H = "ab" * 32
OTHER = "cd" * 32
TX_TABLES = ["rec.start_tx", "rec.finish_tx", "rec.validation_tx", "rec.validation_vote_tx"]


def log() -> list[dict]:
    """An inference challenged by slot 4 (weight 2) and validated by the votes of slots 9, 6 and 11 (weights 2, 3 and
    5: 10 > threshold 8 of 16)."""
    return [escrow(), tx("start", 1, 1, prompt_hash=H, input_length=10, max_tokens=5),
            tx("confirm_start", 1, 2, confirmed_at=1),
            tx("finish", 1, 3, executor_slot=1, input_tokens=10, output_tokens=5, response_hash=H),
            tx("validation", 1, 4, validator_slot=4, valid=False),
            tx("validation_vote", 1, 5, voter_slot=9, vote_valid=True),
            tx("validation_vote", 1, 6, voter_slot=6, vote_valid=True),
            tx("validation_vote", 1, 7, voter_slot=11, vote_valid=True)]


FIRST_VOTE = tx("validation_vote", 1, 5, voter_slot=9, vote_valid=True)
REPEAT = tx("validation_vote", 1, 8, voter_slot=9, vote_valid=False)  # slot 9's second vote: the protocol ignores it


def state(url) -> tuple:
    with psycopg.connect(url) as c:
        quarantined = sorted((kind, json.loads(raw)["diff_nonce"], json.loads(raw).get("vote_valid"))
                             for kind, raw in c.execute("SELECT kind, raw FROM rec.quarantine"))
        views = c.execute("SELECT status, votes_valid, votes_invalid FROM api.inferences WHERE inference_id = 1"
                          ).fetchall()
    return table_snapshot(url, TX_TABLES), quarantined, views


def reasons(conn) -> dict:
    return {(source.rsplit("/", 1)[-1], line): reason
            for source, line, reason in conn.execute("SELECT source, line, reason FROM api.quarantine")}


@pytest.mark.parametrize("batch_lines", [50_000, 2], ids=["one batch", "a batch per two lines"])
def test_a_repeated_vote_in_either_order_of_one_file_stores_the_first(db_url, second_db_url, tmp_path, batch_lines):
    log_order = write_lines(tmp_path / "log.ndjson", [*log(), REPEAT])
    reversed_ = write_lines(tmp_path / "rev.ndjson", [REPEAT, *reversed(log())])
    a = ingest(db_url, log_order, batch_lines=batch_lines)
    b = ingest(second_db_url, reversed_, batch_lines=batch_lines)
    assert state(db_url) == state(second_db_url)
    tables, quarantined, views = state(db_url)
    assert quarantined == [("validation_vote", 8, False)]
    assert views == [("Validated", 10, 2)]  # slot 9's valid vote counts; its second one does not
    assert a.quarantined == b.quarantined == 1


def test_a_repeated_vote_across_commands_in_either_order(db_url, second_db_url, tmp_path, conn):
    base = write_lines(tmp_path / "log.ndjson", log())
    late = write_lines(tmp_path / "late.ndjson", [REPEAT])
    assert [ingest(db_url, p).quarantined for p in (base, late)] == [0, 1]
    assert [ingest(second_db_url, p).quarantined for p in (late, base)] == [0, 1]
    assert state(db_url) == state(second_db_url)
    # the stored-first order: the late line is refused, naming both nonces and where the applied tx came from
    assert reasons(conn) == {("late.ndjson", 1): (
        f"validation_vote (escrow_id 1971, inference_id 1, voter_slot 9) at diff_nonce 8 is a second tx of its key: "
        f"the one at diff_nonce 5 ({base} line 6) comes first and is the one the protocol applies, so this one is "
        f"not stored")}
    with psycopg.connect(second_db_url) as c:
        # the other order: the stored vote is displaced, and quarantined under its own file and line
        assert reasons(c) == {("late.ndjson", 1): (
            f"validation_vote (escrow_id 1971, inference_id 1, voter_slot 9) at diff_nonce 8 was stored, then "
            f"displaced by another tx of its key at the lower diff_nonce 5 ({base} line 6), the one the protocol "
            f"applies")}
        assert json.loads(c.execute("SELECT raw FROM rec.quarantine").fetchone()[0]) == REPEAT
        # a displacement is a tx stored in another's place, not an amendment of it
        assert c.execute("SELECT count(*) FROM rec.amendment").fetchone() == (0,)
        assert c.execute("SELECT revision FROM rec.validation_vote_tx WHERE voter_slot = 9").fetchone() == (1,)


def test_reloading_keeps_one_quarantine_row_and_the_applied_tx(db_url, tmp_path, conn):
    path = write_lines(tmp_path / "log.ndjson", [*log(), REPEAT])
    ingest(db_url, path)
    again = ingest(db_url, path)
    assert (again.loaded, again.amended) == (0, 0)
    assert conn.execute("SELECT count(*) FROM rec.quarantine").fetchone() == (1,)
    assert conn.execute("SELECT diff_nonce, vote_valid FROM rec.validation_vote_tx WHERE voter_slot = 9"
                        ).fetchone() == (5, True)


def test_a_record_at_the_same_nonce_is_an_amendment_as_before(db_url, tmp_path, conn):
    ingest(db_url, write_lines(tmp_path / "log.ndjson", log()))
    fixed = dict(FIRST_VOTE, vote_valid=False)
    summary = ingest(db_url, write_lines(tmp_path / "fix.ndjson", [fixed]))
    assert (summary.amended, summary.quarantined) == (1, 0)
    assert conn.execute("SELECT vote_valid, revision FROM rec.validation_vote_tx WHERE voter_slot = 9"
                        ).fetchone() == (False, 2)
    assert conn.execute("SELECT kind FROM rec.amendment").fetchall() == [("validation_vote",)]


def test_a_second_start_at_a_later_nonce_does_not_replace_the_first(db_url, second_db_url, tmp_path):
    second = tx("start", 1, 9, prompt_hash=OTHER, input_length=99, max_tokens=1)
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [*log(), second]))
    ingest(second_db_url, write_lines(tmp_path / "b.ndjson", [second, *log()]))
    assert state(db_url) == state(second_db_url)
    assert state(db_url)[1] == [("start", 9, None)]


# F3: a later record without optional fields keeps the stored ones

PAYLOAD = '{"error": {"message": "maximum context length is 8 tokens", "code": 400}}'


def refusal(**over) -> dict:
    return {**tx("finish", 5, 9, executor_slot=9, input_tokens=0, output_tokens=0, response_hash=H), **over}


def payload_state(url) -> list:
    with psycopg.connect(url) as c:
        return c.execute("SELECT response_hash, response_payload FROM rec.finish_tx WHERE inference_id = 5"
                         ).fetchall()


@pytest.mark.parametrize("bare", [refusal(), refusal(response_payload=None)], ids=["absent", "null"])
def test_a_finish_without_its_payload_keeps_the_stored_one_in_either_order(db_url, second_db_url, tmp_path, bare):
    full = write_lines(tmp_path / "full.ndjson", [escrow(), refusal(response_payload=PAYLOAD)])
    without = write_lines(tmp_path / "bare.ndjson", [bare])
    for p in (full, without):
        ingest(db_url, p)
    for p in (without, full):
        ingest(second_db_url, p)
    assert payload_state(db_url) == payload_state(second_db_url) == [(H, PAYLOAD)]


def test_lines_of_one_key_in_one_batch_combine_in_either_order(db_url, second_db_url, tmp_path):
    full = [refusal(response_payload=PAYLOAD), escrow(creator="gonka1user", max_nonce=500),
            {"kind": "epoch", "epoch_index": 408, "start_height": 100, "end_height": 200}]
    bare = [refusal(), escrow(), {"kind": "epoch", "epoch_index": 408}]
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [*full, *bare]))
    ingest(second_db_url, write_lines(tmp_path / "b.ndjson", [*bare, *full]))
    tables = ["rec.escrow", "rec.epoch", "rec.finish_tx"]
    assert table_snapshot(db_url, tables) == table_snapshot(second_db_url, tables)
    assert payload_state(db_url) == [(H, PAYLOAD)]
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT creator, max_nonce FROM rec.escrow").fetchone() == ("gonka1user", 500)
        assert c.execute("SELECT start_height, end_height FROM rec.epoch").fetchone() == (100, 200)


def test_a_finish_under_another_response_hash_does_not_keep_the_payload(db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "full.ndjson", [escrow(), refusal(response_payload=PAYLOAD)]))
    ingest(db_url, write_lines(tmp_path / "other.ndjson", [refusal(response_hash=OTHER)]))
    assert payload_state(db_url) == [(OTHER, None)]


def test_a_minimal_escrow_or_epoch_record_keeps_the_stored_fields(db_url, second_db_url, tmp_path):
    full = [escrow(creator="gonka1user", amount="18446744073709551615", max_nonce=500),
            {"kind": "epoch", "epoch_index": 408, "start_height": 100, "end_height": 200}]
    minimal = [escrow(), {"kind": "epoch", "epoch_index": 408, "start_height": None}]
    a, b = write_lines(tmp_path / "full.ndjson", full), write_lines(tmp_path / "min.ndjson", minimal)
    for p in (a, b):
        ingest(db_url, p)
    for p in (b, a):
        ingest(second_db_url, p)
    tables = ["rec.escrow", "rec.epoch"]
    assert table_snapshot(db_url, tables) == table_snapshot(second_db_url, tables)
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT creator, amount::text, max_nonce FROM rec.escrow").fetchone() == (
            "gonka1user", "18446744073709551615", 500)
        assert c.execute("SELECT start_height, end_height FROM rec.epoch").fetchone() == (100, 200)


def test_an_amendment_that_changes_a_value_still_replaces_it(db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [{"kind": "epoch", "epoch_index": 408, "start_height": 100,
                                                        "end_height": 200}]))
    summary = ingest_paths(db_url, [str(write_lines(tmp_path / "b.ndjson",
                                                    [{"kind": "epoch", "epoch_index": 408, "end_height": 250}]))])
    assert summary.amended == 1
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT start_height, end_height FROM rec.epoch").fetchone() == (100, 250)


# the slot check holds whichever of a record and its escrow is loaded first

OUT_OF_RANGE = [tx("validation_vote", 1, 8, voter_slot=40, vote_valid=False),
                tx("timeout", 2, 9, reason="refused", votes=[{"voter_slot": 0, "accept": True},
                                                             {"voter_slot": 30, "accept": True}]),
                {"kind": "host_stats", "escrow_id": "1971", "slot_id": 17, "missed": 1}]


def slot_state(url) -> tuple:
    with psycopg.connect(url) as c:
        quarantined = sorted((kind, reason.split(" (its escrow")[0]) for kind, reason in
                             c.execute("SELECT kind, reason FROM rec.quarantine"))
        rejected = c.execute("SELECT count(*) FROM api.replay_rejections WHERE reason = 'slot_out_of_range'"
                             ).fetchone()[0]
    return table_snapshot(url, [*TX_TABLES, "rec.timeout_tx", "rec.host_stats"]), quarantined, rejected


@pytest.mark.parametrize("split", ["commands", "batches"])
def test_a_slot_out_of_range_is_quarantined_whether_its_escrow_comes_first_or_last(db_url, second_db_url, tmp_path,
                                                                                    conn, split):
    first = write_lines(tmp_path / "first.ndjson", [*log(), *OUT_OF_RANGE])
    assert ingest(second_db_url, first).quarantined == 3
    rest = write_lines(tmp_path / "rest.ndjson", [*log()[1:], *OUT_OF_RANGE])
    if split == "commands":
        summaries = [ingest(db_url, rest), ingest(db_url, write_lines(tmp_path / "esc.ndjson", [escrow()]))]
        assert [s.quarantined for s in summaries] == [0, 3]
    else:  # one file, the escrow in a later batch than the records it contradicts
        assert ingest(db_url, write_lines(tmp_path / "last.ndjson", [*log()[1:], *OUT_OF_RANGE, escrow()]),
                      batch_lines=4).quarantined == 3
    assert slot_state(db_url) == slot_state(second_db_url)
    assert slot_state(db_url)[1] == [
        ("host_stats", "field slot_id: slot 17 out of range for escrow with 16 slots"),
        ("timeout", "field votes: a voter_slot is out of range for escrow with 16 slots"),
        ("validation_vote", "field voter_slot: slot 40 out of range for escrow with 16 slots")]
    assert slot_state(db_url)[2] == 0  # never stored, so never a replay rejection
    if split == "commands":  # each under the file and line it came from, its record kept
        rows = conn.execute("SELECT source, line, reason FROM api.quarantine ORDER BY line").fetchall()
        assert [(s.rsplit("/", 1)[-1], n) for s, n, _ in rows] == [("rest.ndjson", 8), ("rest.ndjson", 9),
                                                                    ("rest.ndjson", 10)]
        assert rows[0][2].endswith("(its escrow record was loaded after it)")
        raw = conn.execute("SELECT raw FROM rec.quarantine WHERE line = 8").fetchone()[0]
        assert json.loads(raw) == OUT_OF_RANGE[0]


def test_a_later_settlement_reading_replaces_the_stored_one_whole(db_url, tmp_path):
    """A settlement is one transaction: its message is never kept under another reading's hash."""
    first = {"kind": "settlement", "escrow_id": "1971", "tx_hash": H, "msg": "AAAA", "extra_field": 1}
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [escrow(), first]))
    ingest(db_url, write_lines(tmp_path / "b.ndjson", [{"kind": "settlement", "escrow_id": "1971", "tx_hash": OTHER}]))
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT tx_hash, msg, extra FROM rec.settlement").fetchone() == (OTHER, None, None)

"""A stream that interleaves escrows (the order a block-ordered feed of the chain delivers) loads exactly as the same
records grouped by escrow: the typing workers group each batch's tx rows by escrow, and a batch spanning several
epochs is routed a slice per escrow; amendments, slot quarantine and resume are unchanged by it."""
from __future__ import annotations

import orjson
import psycopg

from indexer.load.partitions import EpochRouter
from indexer.load.prepare import group_by_escrow, prepare_batch
from indexer.load.probe import keys_may_exist
from indexer.synth import generate
from tests.support.api_views import interleaved
from tests.support.helpers import db_state, escrow, ingest, tx, write_lines

H = "ab" * 32
# every tx table and the replay's, without what differs by where a line is in its file
COMPARED = ["rec.start_tx", "rec.confirm_start_tx", "rec.finish_tx", "rec.validation_tx", "rec.validation_vote_tx",
            "rec.timeout_tx", "rec.error_miss_tx", "rec.host_stats", "rec.escrow", "rec.amendment",
            "replay.inference"]
BY_LINE = {"loaded_at", "amended_at", "replayed_at", "marked_at", "source_line", "line"}


def test_group_by_escrow_keeps_every_row_and_spans_each_escrow():
    copy = b"1\t10\ta\n2\t11\tb\n3\t10\tc\n4\t1\\\\2\td\n5\t11\te\n"
    grouped, spans = group_by_escrow(copy)
    assert grouped == b"1\t10\ta\n3\t10\tc\n2\t11\tb\n5\t11\te\n4\t1\\\\2\td\n"
    assert [(cell, grouped[s:e]) for cell, s, e in spans] == [
        (b"10", b"1\t10\ta\n3\t10\tc\n"), (b"11", b"2\t11\tb\n5\t11\te\n"), (b"1\\\\2", b"4\t1\\\\2\td\n")]
    one = b"1\t10\ta\n2\t10\tb\n"
    assert group_by_escrow(one) == (one, [(b"10", 0, len(one))])


def test_routing_a_slice_per_escrow_is_routing_each_row():
    # an escrow id with a backslash is spelt escaped in COPY text, as the row's cell is
    grouped, spans = group_by_escrow(b"1\t10\ta\n2\t11\tb\n3\t10\tc\n4\t1\\\\2\td\n")
    epochs = {"10": 400, "11": 401, "1\\2": -1}
    assert EpochRouter.route(grouped, epochs, spans) == EpochRouter.route(grouped, epochs) == (
        b"1\t10\ta\t400\n3\t10\tc\t400\n2\t11\tb\t401\n4\t1\\\\2\td\t-1\n")


def test_interleaved_stream_over_epochs_loads_as_the_escrow_order(tmp_path, pg_admin_url, template_db):
    from indexer.db.scratch import scratch_database

    records = list(generate(seed=5, escrows=6, inferences=40, epochs=3, hosts=10))
    assert len({r["epoch_index"] for r in records if r["kind"] == "escrow"}) == 3
    states = []
    for name, order in (("escrow", records), ("interleaved", interleaved(records))):
        with scratch_database(pg_admin_url, "indexer_t", template=template_db) as url:
            # small batches: each spans escrows of several epochs
            summary = ingest(url, write_lines(tmp_path / f"{name}.ndjson", order), batch_lines=200)
            assert (summary.loaded, summary.quarantined, summary.amended) == (len(records), 0, 0)
            states.append(db_state(url, BY_LINE, COMPARED))
            with psycopg.connect(url) as c:  # every tx row in its escrow's epoch partition
                assert c.execute("SELECT count(*) FROM rec.start_tx t JOIN rec.escrow e USING (escrow_id) "
                                 "WHERE t.epoch_index <> e.epoch_index").fetchone()[0] == 0
    assert states[0] == states[1]
    assert states[0]["replay.inference"]


def _two_epochs(finish_tokens: int = 20, slot: int = 1) -> list[dict]:
    """Two escrows of two epochs, their records alternating."""
    out = [escrow("10", epoch=700), escrow("20", epoch=701)]
    for i in range(1, 4):
        for e in ("10", "20"):
            out += [tx("start", i, 3 * i, e, prompt_hash=H, max_tokens=100, input_length=10),
                    tx("finish", i, 3 * i + 1, e, executor_slot=slot if (e, i) == ("20", 2) else 1, input_tokens=10,
                       output_tokens=finish_tokens if (e, i) == ("10", 2) else 20, response_hash=H)]
    return out


def test_an_amendment_in_an_interleaved_batch_over_epochs_is_recorded(db_url, tmp_path, conn):
    ingest(db_url, write_lines(tmp_path / "first.ndjson", _two_epochs()))
    summary = ingest(db_url, write_lines(tmp_path / "second.ndjson", _two_epochs(finish_tokens=99)))
    assert summary.amended == 1
    assert conn.execute("SELECT escrow_id, inference_id, output_tokens, revision, epoch_index FROM rec.finish_tx "
                        "WHERE revision > 1").fetchall() == [("10", 2, 99, 2, 700)]
    assert conn.execute("SELECT kind, record_key, previous->>'output_tokens' FROM rec.amendment").fetchall() == [
        ("finish", ["10", 2], "20")]


def test_a_slot_out_of_range_in_an_interleaved_batch_over_epochs_is_quarantined(db_url, tmp_path, conn):
    records = [escrow("10", epoch=700), escrow("20", epoch=701, slots=["gonka1hostA"] * 4)]
    records += _two_epochs(slot=6)[2:]  # escrow 20 has 4 slots: its finish of inference 2 names slot 6
    path = write_lines(tmp_path / "bad.ndjson", records)
    summary = ingest(db_url, path)
    line = next(n for n, r in enumerate(records, 1) if r.get("executor_slot") == 6)
    assert summary.quarantined == 1
    assert conn.execute("SELECT line FROM rec.quarantine").fetchall() == [(line,)]
    assert conn.execute("SELECT escrow_id, epoch_index, count(*) FROM rec.finish_tx GROUP BY 1, 2 ORDER BY 1"
                        ).fetchall() == [("10", 700, 3), ("20", 701, 2)]


def test_a_batch_over_epochs_probes_each_escrow_in_its_partition(db_url, tmp_path, conn):
    records = [escrow("e1", epoch=7), escrow("e2", epoch=8)]
    for e in ("e1", "e2"):
        records += [tx("start", i, i, e, prompt_hash=H, max_tokens=100, input_length=10) for i in range(1, 6)]
    ingest(db_url, write_lines(tmp_path / "first.ndjson", records))
    epochs = {"e1": 7, "e2": 8, "e3": 999}  # epoch 999 has no partition: its escrow is probed in the parent
    tables = EpochRouter.probe_tables(conn, epochs)["start"]
    assert tables == {"part.rec_start_tx_e7": ["e1"], "part.rec_start_tx_e8": ["e2"], "rec.start_tx": ["e3"]}
    assert EpochRouter.probe_tables(conn, {"e1": 7}) is None  # one epoch: the batch goes to (and probes) it

    def starts(**ranges):
        ranges = {e: r if isinstance(r, tuple) else (r, r) for e, r in ranges.items()}
        lines = [(n, orjson.dumps(tx("start", i, i, e, prompt_hash=H, max_tokens=100, input_length=10)))
                 for n, (e, i) in enumerate(((e, i) for e, (lo, hi) in ranges.items() for i in range(lo, hi + 1)), 1)]
        return prepare_batch(1, lines).kinds["start"]

    past = starts(e1=6, e2=6, e3=1)
    assert not keys_may_exist(conn, "start", past, scopes_by_table=tables)
    assert not keys_may_exist(conn, "start", past)  # the parent says the same
    for overlapping in (starts(e1=6, e2=(5, 7)), starts(e1=(1, 9))):
        assert keys_may_exist(conn, "start", overlapping, scopes_by_table=tables)
        assert keys_may_exist(conn, "start", overlapping)
    # an escrow looked up in another epoch's partition is not found there: each is probed where its rows are
    assert not keys_may_exist(conn, "start", starts(e2=(1, 9)), scopes_by_table={"part.rec_start_tx_e7": ["e2"]})
    # the host stats (keyed by escrow and slot) likewise
    host = prepare_batch(1, [(1, orjson.dumps({"kind": "host_stats", "escrow_id": "e2", "slot_id": 0, "missed": 0,
                                                "invalid": 0, "cost": "1", "required_validations": 1,
                                                "completed_validations": 1}))]).kinds["host_stats"]
    assert not keys_may_exist(conn, "host_stats", host,
                              scopes_by_table=EpochRouter.probe_tables(conn, epochs)["host_stats"])

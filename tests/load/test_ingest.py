"""NDJSON ingest against the real database: idempotency, amendments, last-wins duplicates, number forms, extras."""
from __future__ import annotations

import json

import psycopg

from indexer.synth import generate
from tests.support.helpers import db_state, escrow, ingest, tx, write_lines

# Columns that legitimately differ between two loads of the same content.
TIMES = {"loaded_at", "amended_at", "replayed_at", "marked_at", "quarantined_at", "first_seen_at", "last_loaded_at",
         "completed_at"}
IDS = {"source_id", "source_line", "revision", "amendment_id"}






def _small_corpus():
    recs = list(generate(seed=5, escrows=3, inferences=40, epochs=2))
    recs[5] = {**recs[5], "note": "an unknown field", "nested": {"a": [1, 2]}}
    return recs + [b"{broken", {"kind": "nope"}]


def test_same_file_twice_changes_nothing(db_url, tmp_path):
    path = write_lines(tmp_path / "a.ndjson", _small_corpus())
    first = ingest(db_url, path, batch_lines=100)
    assert first.loaded > 500 and first.quarantined == 2
    before = db_state(db_url)
    second = ingest(db_url, path, batch_lines=100)
    assert (second.loaded, second.amended) == (0, 0)
    assert second.unchanged == first.loaded
    assert db_state(db_url) == before


def test_same_file_twice_with_duplicates_across_batches_changes_nothing(db_url, tmp_path):
    # The same finish twice with different content, farther apart than one batch: the later line wins, and
    # loading the file again must neither flip the record back and forth nor log amendments.
    recs = [escrow(), tx("start", 100, 100), tx("confirm_start", 100, 101)]
    recs += [tx("finish", 100, 102, executor_slot=4, input_tokens=5, output_tokens=10, response_hash="aa")]
    recs += [tx("start", i, i) for i in range(200, 210)]
    recs += [tx("finish", 100, 102, executor_slot=4, input_tokens=5, output_tokens=20, response_hash="aa")]
    path = write_lines(tmp_path / "dup.ndjson", recs)
    ingest(db_url, path, batch_lines=3)
    before = db_state(db_url)
    second = ingest(db_url, path, batch_lines=3)
    assert (second.loaded, second.amended) == (0, 0)
    assert db_state(db_url) == before
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT output_tokens, source_line FROM rec.finish_tx").fetchone() == (20, len(recs))
        assert c.execute("SELECT output_tokens FROM api.inferences WHERE inference_id = 100").fetchone() == (20,)


def _challenge(flip_vote: bool, output_tokens: int):
    """Reference challenge (executor slot 5 = B): D challenges, E votes valid, A and C invalid -> Invalidated at
    6176. With A's vote flipped to valid, E + A = 9 > 8 -> Validated at 6175."""
    return [
        escrow(),
        tx("start", 6149, 6149, prompt_hash="ab" * 32, model="m", input_length=100, max_tokens=50, started_at=1),
        tx("confirm_start", 6149, 6150, confirmed_at=2),
        tx("finish", 6149, 6151, executor_slot=5, input_tokens=100, output_tokens=output_tokens,
           response_hash="cd" * 32),
        tx("validation", 6149, 6170, validator_slot=9, valid=False),
        tx("validation_vote", 6149, 6174, voter_slot=11, vote_valid=True),
        tx("validation_vote", 6149, 6175, voter_slot=0, vote_valid=flip_vote),
        tx("validation_vote", 6149, 6176, voter_slot=6, vote_valid=False),
    ]


def test_amendment_replaces_row_keeps_history_and_re_replays(db_url, tmp_path, conn):
    ingest(db_url, write_lines(tmp_path / "a.ndjson", _challenge(False, 10)))
    assert conn.execute("SELECT outcome, resolved_nonce FROM api.challenges").fetchone() == ("Invalidated", 6176)
    assert conn.execute("SELECT invalid FROM replay.slot_stats WHERE slot_id = 5").fetchone() == (1,)

    summary = ingest(db_url, write_lines(tmp_path / "b.ndjson", _challenge(True, 20)))
    assert (summary.loaded, summary.amended, summary.unchanged) == (0, 2, 6)
    assert conn.execute("SELECT output_tokens, revision FROM rec.finish_tx").fetchone() == (20, 2)
    assert conn.execute("SELECT vote_valid, revision FROM rec.validation_vote_tx WHERE voter_slot = 0"
                        ).fetchone() == (True, 2)
    history = conn.execute("SELECT kind, record_key, previous->'output_tokens', previous->'vote_valid', s.uri "
                           "FROM rec.amendment a JOIN rec.source s USING (source_id) ORDER BY kind").fetchall()
    b_uri = str((tmp_path / "b.ndjson").resolve())
    assert history == [("finish", ["1971", 6149], 10, None, b_uri),
                       ("validation_vote", ["1971", 6149, 0], None, False, b_uri)]
    # the escrow was replayed again: the flipped vote decides the challenge the other way
    assert conn.execute("SELECT outcome, resolved_nonce, votes_valid FROM api.challenges").fetchone() == \
        ("Validated", 6175, 9)
    assert conn.execute("SELECT output_tokens, penalty FROM api.inferences").fetchone() == (20, None)
    assert conn.execute("SELECT invalid FROM replay.slot_stats WHERE slot_id = 5").fetchone() == (0,)


def test_reloading_an_amended_record_unchanged_is_not_an_amendment(db_url, tmp_path, conn):
    ingest(db_url, write_lines(tmp_path / "a.ndjson", _challenge(False, 10)))
    b = write_lines(tmp_path / "b.ndjson", _challenge(True, 20))
    ingest(db_url, b)
    again = ingest(db_url, b)
    assert (again.loaded, again.amended) == (0, 0)
    assert conn.execute("SELECT count(*) FROM rec.amendment").fetchone() == (2,)


def test_same_key_twice_in_one_batch_last_wins(db_url, tmp_path, conn):
    recs = [escrow(), tx("start", 100, 100), tx("confirm_start", 100, 101),
            tx("finish", 100, 102, executor_slot=4, input_tokens=5, output_tokens=10, response_hash="aa"),
            tx("finish", 100, 102, executor_slot=4, input_tokens=5, output_tokens=30, response_hash="bb")]
    summary = ingest(db_url, write_lines(tmp_path / "a.ndjson", recs))
    assert summary.loaded == 4
    assert conn.execute("SELECT output_tokens, response_hash, source_line FROM rec.finish_tx").fetchone() == \
        (30, "bb", 5)
    assert conn.execute("SELECT output_tokens FROM api.inferences").fetchone() == (30,)


def test_unknown_fields_are_kept_in_extra(db_url, tmp_path, conn):
    extra = {"note": "kept", "nested": {"a": [1, None, True]}, "big": 2 ** 70, "neg": -(2 ** 65), "nothing": None}
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [json.dumps({**escrow(), **extra}).encode()]))
    assert conn.execute("SELECT extra FROM rec.escrow").fetchone() == (extra,)
    assert conn.execute("SELECT (extra->>'big')::numeric = 1180591620717411303424 FROM rec.escrow").fetchone() == \
        (True,)


def _as_strings(rec: dict) -> dict:
    """The same record with every integer (also inside votes) written as a decimal string."""
    def conv(v):
        if isinstance(v, bool):
            return v
        if isinstance(v, int):
            return str(v)
        if isinstance(v, list):
            return [conv(x) for x in v]
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return v
    return {k: (v if k in ("kind", "slots", "model_args") else conv(v)) for k, v in rec.items()}


def test_64_bit_values_as_numbers_or_decimal_strings_load_identically(db_url, second_db_url, tmp_path):
    recs = list(generate(seed=9, escrows=2, inferences=25, epochs=1))
    recs += [{"kind": "host_stats", "escrow_id": 77, "slot_id": 0, "missed": 9223372036854775807, "invalid": 0,
              "cost": 18446744073709551615, "required_validations": 0, "completed_validations": 0},
             {"kind": "epoch", "epoch_index": 9223372036854775807, "start_height": 1, "end_height": 2}]
    ingest(db_url, write_lines(tmp_path / "numbers.ndjson", recs))
    s = ingest(second_db_url, write_lines(tmp_path / "strings.ndjson", [_as_strings(r) for r in recs]))
    assert s.quarantined == 0
    assert db_state(second_db_url, TIMES | IDS | {"digest", "uri"}) == db_state(db_url, TIMES | IDS | {"digest", "uri"})
    with psycopg.connect(second_db_url) as c:
        assert c.execute("SELECT escrow_id, cost::text, missed FROM rec.host_stats WHERE escrow_id = '77'"
                         ).fetchone() == ("77", "18446744073709551615", 9223372036854775807)


def test_u64_cost_fills_the_numeric_column(db_url, tmp_path, conn):
    top = 18446744073709551615
    recs = [escrow(), {"kind": "host_stats", "escrow_id": "1971", "slot_id": 0, "cost": top},
            {"kind": "host_stats", "escrow_id": "1971", "slot_id": 1, "cost": str(top)},
            {"kind": "host_epoch_stats", "epoch_index": 408, "participant": "gonka1hostA", "cost": str(top),
             "missed": 0, "invalid": 0, "escrow_count": 1}]
    summary = ingest(db_url, write_lines(tmp_path / "a.ndjson", recs))
    assert summary.quarantined == 0
    assert conn.execute("SELECT array_agg(cost::text ORDER BY slot_id) FROM rec.host_stats").fetchone() == \
        ([str(top), str(top)],)
    assert conn.execute("SELECT cost = 18446744073709551615 FROM rec.host_epoch_stats").fetchone() == (True,)


def test_ingest_marks_touched_epochs_and_replays_touched_escrows(db_url, tmp_path, conn):
    recs = [escrow(), tx("start", 100, 100), {"kind": "epoch", "epoch_index": 500}]
    path = write_lines(tmp_path / "a.ndjson", recs)
    from indexer.load.ingest import ingest_paths
    ingest_paths(db_url, [str(path)])
    assert conn.execute("SELECT escrow_id FROM replay.dirty_escrow").fetchall() == [("1971",)]
    assert {r[0] for r in conn.execute("SELECT epoch_index FROM rules.dirty_epoch")} >= {500}
    ingest(db_url, path)
    assert conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone() == (0,)
    assert conn.execute("SELECT status FROM api.inferences").fetchone() == ("Pending",)


def test_batches_commit_without_waiting_for_the_wal_and_leave_their_stages_empty(db_url, tmp_path):
    """A file's batches commit with synchronous_commit off (the file is the durable copy; each batch's rows and
    cursor are one transaction) and the file's completion with the session's own setting (on by default), so a
    finished load is durable; the stage tables an upsert filled are emptied inside the batch, since they are not
    ON COMMIT DELETE ROWS (whose truncation every commit that touches a temp table pays for every such table)."""
    from indexer.load.ingest import ingest_file
    from indexer.sources.ndjson import open_input

    path = write_lines(tmp_path / "a.ndjson", _small_corpus())
    ingest(db_url, path, batch_lines=100)  # the second load's batches take the upsert path, through the stages
    settings = []
    with psycopg.connect(db_url) as conn:
        conn.execute("SET synchronous_commit = 'remote_apply'")  # not the test server's own setting (off)
        def batch(lines, escrows):
            settings.append(conn.execute("SHOW synchronous_commit").fetchone()[0])
            conn.commit()

        inp = open_input(str(path))
        try:
            summary = ingest_file(conn, inp, batch_lines=100, on_batch=batch)
        finally:
            inp.cleanup()
        assert summary.unchanged > 500
        assert len(settings) > 3 and set(settings) == {"off"}
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "remote_apply"
        stages = [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = pg_my_temp_schema() AND c.relkind = 'r' "
            "AND c.relname LIKE 'stage\\_%'")]
        assert "stage_start" in stages and "stage_finish" in stages
        for stage in stages:
            assert conn.execute(f"SELECT count(*) FROM pg_temp.{stage}").fetchone()[0] == 0, stage


def test_a_v5_finishs_served_hash_is_stored_in_extra_and_exported_back(db_url, tmp_path, conn):
    """Every v5 Finish carries served_hash, which no column holds. The block typer writes such lines in C (with a
    second unknown scalar beside it, in line order): the database's extra holds them, and export writes the same
    records back, so an archive of v5 data reloads identically."""
    from indexer.load.export import export_records

    served = "ab" * 32
    recs = [escrow()] + [tx("start", i, i, prompt_hash="cd" * 32) for i in range(1, 41)]
    recs += [tx("finish", i, 40 + i, executor_slot=i % 16, input_tokens=100 + i, output_tokens=7,
                response_hash="ef" * 32, served_hash=served, tx_index=1, protocol_version="v5", zz=-i)
             for i in range(1, 41)]
    path = write_lines(tmp_path / "v5.ndjson", recs)
    assert ingest(db_url, path).loaded == len(recs)
    extras = conn.execute("SELECT inference_id, extra FROM rec.finish_tx ORDER BY inference_id").fetchall()
    assert extras == [(i, {"served_hash": served, "zz": -i}) for i in range(1, 41)]
    out = tmp_path / "out.ndjson"
    export_records(db_url, str(out))
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    finishes = sorted((r for r in exported if r["kind"] == "finish"), key=lambda r: r["inference_id"])
    assert [(r["served_hash"], r["zz"], r["tx_index"]) for r in finishes] == [(served, -i, 1) for i in range(1, 41)]

"""Protocol replay through the database: NDJSON in, replay tables and api views out (gonka-devshard.md §1.2, §3).

The default escrow of tests/support/helpers.escrow has 16 slots: A=0-3, B=4-5, C=6-8, D=9-10, E=11-15, so the
weights are A 4, B 2, C 3, D 2, E 5, and with factor 50 the threshold is 8 (a decision needs 9). The executor of an
inference is slot inference_id % 16.
"""
from __future__ import annotations

import psycopg

from tests.support.helpers import escrow, ingest, tx, write_lines

H = "ab" * 32


def start(i, nonce=None, eid="1971"):
    return tx("start", i, i if nonce is None else nonce, escrow_id=eid, prompt_hash=H, model="m", input_length=100,
              max_tokens=50, started_at=1_790_000_000)


def confirm(i, nonce, eid="1971"):
    return tx("confirm_start", i, nonce, escrow_id=eid, confirmed_at=1_790_000_001)


def finish(i, nonce, slot, eid="1971", out=7):
    return tx("finish", i, nonce, escrow_id=eid, executor_slot=slot, input_tokens=100, output_tokens=out,
              response_hash="cd" * 32)


def validation(i, nonce, slot, valid, eid="1971"):
    return tx("validation", i, nonce, escrow_id=eid, validator_slot=slot, valid=valid)


def vote(i, nonce, slot, valid, eid="1971"):
    return tx("validation_vote", i, nonce, escrow_id=eid, voter_slot=slot, vote_valid=valid)


def timeout(i, nonce, reason, voters, eid="1971", accept=True):
    return tx("timeout", i, nonce, escrow_id=eid, reason=reason,
              votes=[{"voter_slot": s, "accept": accept} for s in voters])


def error_miss(i, nonce, voters, eid="1971"):
    return tx("error_miss", i, nonce, escrow_id=eid, votes=[{"voter_slot": s, "accept": True} for s in voters])


def load(db_url, tmp_path, records, name="in.ndjson"):
    return ingest(db_url, write_lines(tmp_path / name, records))


def statuses(conn, eid="1971"):
    return dict(conn.execute("SELECT inference_id, status FROM api.inferences WHERE escrow_id = %s", (eid,)).fetchall())


def rejections(conn, eid="1971"):
    return conn.execute("SELECT inference_id, kind, slot, reason FROM api.replay_rejections "
                        "WHERE escrow_id = %s AND NOT ignored ORDER BY diff_nonce, inference_id", (eid,)).fetchall()


# Inference ids (= start nonce) chosen so that executor = id % 16 is a slot of host B (4 or 5) unless noted.
def test_every_status_is_derived_from_the_txs(db_url, tmp_path, conn):
    recs = [escrow()]
    # Pending: only started; Started: confirmed.
    recs += [start(100), start(116), confirm(116, 117)]
    # Finished.
    recs += [start(132), confirm(132, 133), finish(132, 134, slot=4)]
    # Challenged: MsgValidation{valid:false} by D (2) stays below the threshold.
    recs += [start(148), confirm(148, 149), finish(148, 150, slot=4), validation(148, 151, 9, False)]
    # Validated: challenged by D, valid votes A (4) + E (5) = 9 > 8.
    recs += [start(164), confirm(164, 165), finish(164, 166, slot=4), validation(164, 167, 9, False),
             vote(164, 168, 0, True), vote(164, 169, 11, True)]
    # Invalidated: D (2) + A (4) + C (3) = 9 > 8.
    recs += [start(180), confirm(180, 181), finish(180, 182, slot=4), validation(180, 183, 9, False),
             vote(180, 184, 0, False), vote(180, 185, 6, False)]
    # TimedOut, refused from Pending: A + E accept = 9.
    recs += [start(196), timeout(196, 199, "refused", [0, 11])]
    # TimedOut, execution from Started.
    recs += [start(212), confirm(212, 213), timeout(212, 215, "execution", [0, 11])]
    # TimedOut by error-miss from Finished.
    recs += [start(228), confirm(228, 229), finish(228, 230, slot=4), error_miss(228, 232, [0, 11])]
    load(db_url, tmp_path, recs)
    assert statuses(conn) == {100: "Pending", 116: "Started", 132: "Finished", 148: "Challenged", 164: "Validated",
                              180: "Invalidated", 196: "TimedOut", 212: "TimedOut", 228: "TimedOut"}
    rows = conn.execute("SELECT inference_id, penalty, timeout_reason, executor_slot, executor_address "
                        "FROM api.inferences ORDER BY inference_id").fetchall()
    assert {r[0]: r[1] for r in rows} == {100: None, 116: None, 132: None, 148: None, 164: None, 180: "invalid",
                                          196: "missed", 212: "missed", 228: "missed"}
    assert {r[0]: r[2] for r in rows if r[2]} == {196: "refused", 212: "execution", 228: "error_miss"}
    assert all(r[3] == 4 and r[4] == "gonka1hostB" for r in rows)
    assert conn.execute("SELECT missed, invalid FROM replay.slot_stats WHERE escrow_id = '1971' AND slot_id = 4"
                        ).fetchone() == (3, 1)
    assert conn.execute("SELECT group_size, vote_threshold, tx_count, rejected_count FROM replay.escrow"
                        ).fetchone() == (16, 8, len(recs) - 1, 0)
    assert rejections(conn) == []


def test_settled_escrow_drains_live_records_to_finished_without_miss(db_url, tmp_path, conn):
    load(db_url, tmp_path, [escrow(settled=True), start(100), start(116), confirm(116, 117)])
    assert statuses(conn) == {100: "Finished", 116: "Finished"}
    assert conn.execute("SELECT count(*) FROM api.inferences WHERE penalty IS NOT NULL").fetchone() == (0,)


def _group_of(n):
    """n single-slot addresses."""
    return [f"gonka1solo{i:02d}" for i in range(n)]


def test_threshold_edges_per_factor_equality_is_not_enough(db_url, tmp_path, conn):
    # 10 single-slot addresses; refused timeouts on inference 1 (executor slot 1) with k accepting voters.
    cases = {  # factor -> (threshold, weights that must fail, weights that must pass)
        0: (5, [5], [6]),     # 0 means half: floor(10 / 2)
        50: (5, [5], [6]),
        67: (6, [6], [7]),    # floor(10 * 67 / 100) = 6
        100: (10, [9], []),   # can never be decided: weight > 10 is impossible
    }
    recs, expect = [], {}
    for factor, (threshold, failing, passing) in cases.items():
        for k in failing + passing + ([10] if factor == 100 else []):
            eid = f"f{factor}-k{k}"
            recs += [escrow(eid, slots=_group_of(10), factor=factor), start(1, eid=eid),
                     timeout(1, 2, "refused", list(range(k)), eid=eid)]
            expect[eid] = (threshold, "TimedOut" if k in passing else "Pending",
                           None if k in passing else f"insufficient_votes:{k}<={threshold}")
    load(db_url, tmp_path, recs)
    got = {}
    for eid in expect:
        (threshold,) = conn.execute("SELECT vote_threshold FROM replay.escrow WHERE escrow_id = %s", (eid,)).fetchone()
        status = statuses(conn, eid)[1]
        rej = rejections(conn, eid)
        got[eid] = (threshold, status, rej[0][3] if rej else None)
    assert got == expect


def test_rejecting_votes_do_not_count_as_weight(db_url, tmp_path, conn):
    recs = [escrow(), start(100), tx("timeout", 100, 103, reason="refused",
                                     votes=[{"voter_slot": 11, "accept": True}, {"voter_slot": 0, "accept": False},
                                            {"voter_slot": 6, "accept": True}])]
    load(db_url, tmp_path, recs)
    assert statuses(conn) == {100: "Pending"}
    assert rejections(conn) == [(100, "timeout", None, "insufficient_votes:8<=8")]


def test_invalid_is_checked_first_after_a_vote(db_url, tmp_path, conn):
    # factor 25 -> threshold 4. Executor slot 4 (B). MsgValidation valid by E (5) while Finished adds 5 valid
    # without a tally; the challenge by A (4) and the invalid vote by D (2) make invalid 6 > 4 while valid 5 > 4.
    load(db_url, tmp_path, [escrow(factor=25), start(100), confirm(100, 101), finish(100, 102, slot=4),
                            validation(100, 103, 11, True), validation(100, 104, 0, False), vote(100, 105, 9, False)])
    row = conn.execute("SELECT vote_threshold, votes_valid, votes_invalid, outcome, resolved_nonce "
                       "FROM api.challenges").fetchone()
    assert row == (4, 5, 6, "Invalidated", 105)


def test_multi_slot_addresses_weigh_their_slot_count_and_vote_once(db_url, tmp_path, conn):
    # Challenge by C (3), invalid votes by E slot 11 (5): 8, not > 8; E again via slot 14 is a duplicate voter;
    # then D (2) makes 10 > 8.
    load(db_url, tmp_path, [escrow(), start(100), confirm(100, 101), finish(100, 102, slot=4),
                            validation(100, 103, 6, False), vote(100, 104, 11, False), vote(100, 105, 14, False),
                            vote(100, 106, 9, False)])
    assert conn.execute("SELECT votes_invalid, outcome, resolved_nonce FROM api.challenges").fetchone() == \
        (10, "Invalidated", 106)
    assert rejections(conn) == [(100, "validation_vote", 14, "duplicate_voter")]


def test_rejected_txs_are_recorded_with_their_reason(db_url, tmp_path, conn):
    recs = [escrow(),
            # finish on a Pending record (no ConfirmStart): wrong status
            start(100), finish(100, 101, slot=4),
            # validator = executor, then a duplicate voter (the challenger's address votes again)
            start(116), confirm(116, 117), finish(116, 118, slot=4), validation(116, 119, 4, False),
            validation(116, 120, 9, False), vote(116, 121, 10, True),
            # a timeout with too little weight: D (2) + B (2) = 4
            start(132), timeout(132, 135, "refused", [9, 4]),
            # an execution timeout on a Pending record
            start(148), timeout(148, 151, "execution", [0, 11]),
            # a vote on a record that is not Challenged
            start(164), confirm(164, 165), finish(164, 166, slot=4), vote(164, 167, 0, False)]
    load(db_url, tmp_path, recs)
    assert rejections(conn) == [
        (100, "finish", 4, "wrong_status:Pending"),
        (116, "validation", 4, "validator_is_executor"),
        (116, "validation_vote", 10, "duplicate_voter"),
        (132, "timeout", None, "insufficient_votes:4<=8"),
        (148, "timeout", None, "wrong_status:Pending"),
        (164, "validation_vote", 0, "wrong_status:Finished"),
    ]
    assert statuses(conn) == {100: "Pending", 116: "Challenged", 132: "Pending", 148: "Pending", 164: "Finished"}
    assert conn.execute("SELECT epoch_index FROM api.replay_rejections LIMIT 1").fetchone() == (408,)
    assert conn.execute("SELECT rejected_count FROM replay.escrow").fetchone() == (6,)


def test_votes_on_a_resolved_record_are_ignored_not_rejected(db_url, tmp_path, conn):
    load(db_url, tmp_path, [escrow(), start(100), confirm(100, 101), finish(100, 102, slot=4),
                            validation(100, 103, 9, False), vote(100, 104, 0, False), vote(100, 105, 6, False),
                            vote(100, 106, 11, True)])
    assert statuses(conn) == {100: "Invalidated"}
    assert rejections(conn) == []
    assert conn.execute("SELECT kind, slot, reason FROM api.replay_rejections WHERE ignored").fetchall() == \
        [("validation_vote", 11, "ignored_resolved")]


def test_late_votes_in_a_second_file_re_replay_the_escrow(db_url, tmp_path, conn):
    first = [escrow(), start(100), confirm(100, 101), finish(100, 102, slot=4), validation(100, 103, 9, False),
             vote(100, 104, 0, False)]
    load(db_url, tmp_path, first, "first.ndjson")
    assert conn.execute("SELECT votes_invalid, outcome FROM api.challenges").fetchone() == (6, "Challenged")
    load(db_url, tmp_path, [vote(100, 105, 6, False)], "late.ndjson")
    assert conn.execute("SELECT votes_invalid, outcome, resolved_nonce FROM api.challenges").fetchone() == \
        (9, "Invalidated", 105)
    assert conn.execute("SELECT invalid FROM replay.slot_stats WHERE slot_id = 4").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone() == (0,)


def test_late_vote_with_an_earlier_nonce_is_replayed_in_nonce_order(db_url, tmp_path, conn):
    # The first file lacks the vote at nonce 104; with it, the escrow resolves at 105 instead of staying open.
    load(db_url, tmp_path, [escrow(), start(100), confirm(100, 101), finish(100, 102, slot=4),
                            validation(100, 103, 9, False), vote(100, 105, 6, False)], "first.ndjson")
    assert statuses(conn) == {100: "Challenged"}
    load(db_url, tmp_path, [vote(100, 104, 0, False)], "late.ndjson")
    assert conn.execute("SELECT outcome, resolved_nonce FROM api.challenges").fetchone() == ("Invalidated", 105)


def test_txs_are_replayed_when_their_escrow_arrives_later(db_url, tmp_path, conn):
    load(db_url, tmp_path, [start(100), confirm(100, 101), finish(100, 102, slot=4)], "txs.ndjson")
    assert conn.execute("SELECT count(*) FROM api.inferences").fetchone() == (0,)
    load(db_url, tmp_path, [escrow()], "escrow.ndjson")
    assert statuses(conn) == {100: "Finished"}
    assert conn.execute("SELECT tx_count FROM replay.escrow").fetchone() == (3,)


def test_host_stats_check_flags_disagreement_with_the_replay(db_url, tmp_path, conn):
    recs = [escrow(), start(100), timeout(100, 103, "refused", [0, 11])]  # executor slot 4 gets one miss
    recs += [{"kind": "host_stats", "escrow_id": "1971", "slot_id": 4, "missed": 1, "invalid": 0, "cost": "0"},
             {"kind": "host_stats", "escrow_id": "1971", "slot_id": 5, "missed": 2, "invalid": 0, "cost": "0"},
             {"kind": "host_stats", "escrow_id": "1971", "slot_id": 6, "missed": 0, "invalid": 1, "cost": "0"},
             {"kind": "host_stats", "escrow_id": "1971", "slot_id": 7, "missed": 0, "invalid": 0, "cost": "0"}]
    load(db_url, tmp_path, recs)
    rows = conn.execute("SELECT slot_id, replay_missed, reported_missed, replay_invalid, reported_invalid, mismatch "
                        "FROM api.host_stats_check WHERE reported_missed IS NOT NULL ORDER BY slot_id").fetchall()
    assert rows == [(4, 1, 1, 0, 0, False), (5, 0, 2, 0, 0, True), (6, 0, 0, 0, 1, True), (7, 0, 0, 0, 0, False)]
    assert conn.execute("SELECT count(*) FROM api.host_stats_check WHERE NOT mismatch").fetchone() == (16 - 2,)


def test_quiet_escrow_with_matching_host_stats_is_not_a_mismatch(db_url, tmp_path, conn):
    # An escrow without any inference: every slot replays to 0 missed / 0 invalid.
    load(db_url, tmp_path, [escrow(), {"kind": "host_stats", "escrow_id": "1971", "slot_id": 3, "missed": 0,
                                       "invalid": 0, "cost": 0}])
    assert conn.execute("SELECT replay_missed, mismatch FROM api.host_stats_check WHERE slot_id = 3").fetchone() == \
        (0, False)
    assert conn.execute("SELECT group_size, tx_count FROM replay.escrow").fetchone() == (16, 0)


def test_parallel_replay_workers_give_the_same_tables_as_one_connection(db_url, second_db_url, tmp_path):
    from indexer.load.ingest import ingest_paths
    from indexer.replay.run import replay_dirty
    from indexer.synth import generate, write_ndjson
    from tests.support.helpers import db_state

    path = tmp_path / "p.ndjson"
    write_ndjson(str(path), generate(seed=11, escrows=6, inferences=80, mix="adversarial"))
    for url in (db_url, second_db_url):
        ingest_paths(url, [str(path)])
    with psycopg.connect(db_url) as c:
        sequential = replay_dirty(c, chunk=2)
    with psycopg.connect(second_db_url) as c:
        parallel = replay_dirty(c, chunk=2, url=second_db_url, workers=2)  # 12 escrows: six chunks over two workers
    assert sequential.escrows == 12
    assert (parallel.escrows, parallel.txs, parallel.inferences) == (sequential.escrows, sequential.txs,
                                                                      sequential.inferences)
    exclude = {"loaded_at", "amended_at", "replayed_at", "marked_at", "quarantined_at", "first_seen_at",
               "last_loaded_at", "completed_at", "source_id", "uri", "digest"}
    assert db_state(db_url, exclude) == db_state(second_db_url, exclude)


def plain_txs(conn, escrow_id):
    """An escrow's txs read table by table into Txs, independently of the replay stage's own reading."""
    from indexer.replay.machine import TX_KINDS, Tx

    txs = []
    for kind in TX_KINDS:
        for (d,) in conn.execute(f"SELECT to_jsonb(t) FROM rec.{kind}_tx t WHERE escrow_id = %s", (escrow_id,)):
            slot = d.get("executor_slot", d.get("validator_slot", d.get("voter_slot")))
            votes = tuple((v["voter_slot"], v["accept"]) for v in d.get("votes") or ())
            txs.append(Tx(d["diff_nonce"], kind, d["inference_id"], slot, d.get("valid", d.get("vote_valid")),
                          d.get("reason"), votes, d.get("input_tokens"), d.get("output_tokens")))
    return txs


def test_database_read_path_replays_like_the_machine_on_txs(db_url, tmp_path, conn):
    # The stage reads per-table column arrays into rows and sorts them plainly; on a log full of rejections,
    # ignored votes and drains that must equal `replay` on the same txs read one by one.
    from indexer.load.ingest import ingest_paths
    from indexer.replay import run
    from indexer.replay.machine import replay
    from indexer.synth import generate, perturb, write_ndjson

    path = tmp_path / "perturbed.ndjson"
    write_ndjson(str(path), perturb(generate(seed=8, escrows=2, inferences=80, mix="adversarial"), 0.25))
    ingest_paths(db_url, [str(path)])
    ids = [r[0] for r in conn.execute("SELECT escrow_id FROM rec.escrow ORDER BY 1")]
    with conn.transaction():
        results = [r for _, part in run.replay_parts(conn, ids, 10**9, 1 << 40) for r in part]
    assert [config.escrow_id for config, *_ in results] == ids
    reasons, drained = set(), 0
    for config, _, result, n in results:
        txs = plain_txs(conn, config.escrow_id)
        assert n == len(txs)
        assert result == replay(config, txs, transitions=False)
        reasons |= {r.reason.split(":")[0] for r in result.rejections + result.ignored}
        drained += sum(rec.drained for rec in result.inferences.values())
    # the log took the unusual paths
    assert {"unknown_inference", "wrong_status", "ignored_duplicate", "ignored_resolved"} <= reasons and drained


def test_the_database_path_replays_a_diff_in_its_tx_index_order(db_url, tmp_path, conn):
    # Two validations of inference 16 (executor slot 0, host A) in one diff: listed invalid first (slot 11, E), the
    # record is Challenged before the valid one (slot 9, D) lands, which then adds no weight; slot order would have
    # applied D's valid one first, while the record was Finished (2 valid).
    records = [escrow(), start(16), confirm(16, 17), finish(16, 18, 0),
               {**validation(16, 19, 11, False), "tx_index": 0}, {**validation(16, 19, 9, True), "tx_index": 1}]
    load(db_url, tmp_path, records)
    row = conn.execute("SELECT status, votes_valid, votes_invalid FROM replay.inference WHERE escrow_id = '1971' "
                       "AND inference_id = 16").fetchone()
    assert row == ("Challenged", 0, 5)

"""The rules stage evaluates dirty epochs on two connections at once when given a URL (indexer.rules.run,
RULES_WORKERS), with the findings one connection gives."""
from __future__ import annotations

import threading

import psycopg
import pytest

from indexer.load.ingest import ingest_paths
from indexer.replay.run import replay_dirty
from indexer.rules import run
from indexer.rules.run import run_rules
from indexer.synth import generate
from tests.support.helpers import db_state, write_lines

RULES_TABLES = ["rules.escrow_limit", "rules.context_refusal", "rules.sibling_finding", "rules.suspect",
                "rules.challenge", "rules.disputable", "rules.refusal_parse", "rules.model_limit"]


@pytest.fixture
def loaded(db_url, tmp_path):
    path = write_lines(tmp_path / "four.ndjson", generate(seed=5, escrows=6, inferences=30, epochs=4,
                                                           mix="adversarial"))
    ingest_paths(db_url, [str(path)])
    with psycopg.connect(db_url) as conn:
        replay_dirty(conn)
    return db_url


def test_two_claims_are_evaluated_at_once(loaded, monkeypatch):
    evaluate, both = run._evaluate, threading.Barrier(2, timeout=20)
    threads = set()

    def evaluate_when_both_hold_a_claim(conn, epochs, whole, summary):
        if threading.get_ident() not in threads:  # each connection's first claim waits for the other's
            threads.add(threading.get_ident())
            both.wait()  # BrokenBarrierError when the claims are evaluated one after the other
        return evaluate(conn, epochs, whole, summary)

    monkeypatch.setattr(run, "_evaluate", evaluate_when_both_hold_a_claim)
    with psycopg.connect(loaded) as conn:
        summary = run_rules(conn, url=loaded, workers=2)
        assert summary.epochs == 4
        assert conn.execute("SELECT count(*) FROM rules.dirty_epoch").fetchone()[0] == 0
        # one rules.run row a claim: two connections, each with its share (4 epochs, 2 a claim)
        assert sorted(len(r[0]) for r in conn.execute("SELECT epochs FROM rules.run")) == [2, 2]


def test_parallel_claims_find_what_one_connection_finds(loaded):
    with psycopg.connect(loaded) as conn:
        one = run_rules(conn)
        serial = db_state(loaded, tables=RULES_TABLES)
        both = run_rules(conn, (0, 1 << 40), url=loaded, workers=2)  # every epoch again, whole
    assert (both.epochs, both.disputable) == (one.epochs, one.disputable) == (4, one.disputable)
    assert db_state(loaded, tables=RULES_TABLES) == serial


def test_a_helper_connection_that_fails_fails_the_stage(loaded, monkeypatch):
    evaluate = run._evaluate
    main = threading.get_ident()

    def fail_in_the_helper(conn, epochs, whole, summary):
        if threading.get_ident() != main:
            raise RuntimeError("rules statement failed in the helper")
        return evaluate(conn, epochs, whole, summary)

    monkeypatch.setattr(run, "_evaluate", fail_in_the_helper)
    with psycopg.connect(loaded) as conn:
        with pytest.raises(RuntimeError, match="in the helper"):
            run_rules(conn, url=loaded, workers=2)
        # what the helper claimed rolled back; every epoch was evaluated by this connection or is still dirty
        evaluated = {e for (epochs,) in conn.execute("SELECT epochs FROM rules.run") for e in epochs}
        dirty = {e for (e,) in conn.execute("SELECT epoch_index FROM rules.dirty_epoch")}
        assert evaluated | dirty == {e for (e,) in conn.execute("SELECT DISTINCT epoch_index FROM rec.escrow")}


def test_a_stopping_main_thread_stops_the_helpers_between_claims(loaded, monkeypatch):
    """The main connection fails on its claim: the helper finishes the claim it holds and claims no other, so the
    epochs the failed claim rolled back stay dirty for the next run (not all evaluated while the caller waits)."""
    evaluate, main = run._evaluate, threading.get_ident()
    helper_holds_a_claim, stop = threading.Event(), threading.Event()

    def fail_in_the_main_thread(conn, epochs, whole, summary):
        if threading.get_ident() == main:
            assert helper_holds_a_claim.wait(20)
            raise KeyboardInterrupt  # a stop, as a signal handler raises it
        helper_holds_a_claim.set()
        assert stop.wait(20), "the failing main thread never told the helper to stop"
        return evaluate(conn, epochs, whole, summary)

    monkeypatch.setattr(run, "_evaluate", fail_in_the_main_thread)
    with psycopg.connect(loaded) as conn:
        with pytest.raises(KeyboardInterrupt):
            run._claim_in_parallel(conn, loaded, 1, 2, run.RulesSummary(), stop)
        claims = [sorted(epochs) for (epochs,) in conn.execute("SELECT epochs FROM rules.run")]
        dirty = sorted(e for (e,) in conn.execute("SELECT epoch_index FROM rules.dirty_epoch"))
    assert len(claims) == 1 and len(claims[0]) == 2  # the helper's one claim, and no second
    assert len(dirty) == 2 and not set(dirty) & set(claims[0])


def test_a_helper_that_cannot_connect_leaves_the_work_to_this_connection(loaded, caplog):
    """A helper's connection refused by the server (here: a database that does not exist, a real error from the
    server like max_connections reached) is logged, and this connection evaluates every epoch."""
    refused = psycopg.conninfo.make_conninfo(loaded, dbname="no_such_database_for_rules_helpers")
    with psycopg.connect(loaded) as conn:
        summary = run_rules(conn, url=refused, workers=2)
        assert summary.epochs == 4
        assert conn.execute("SELECT count(*) FROM rules.dirty_epoch").fetchone()[0] == 0
    assert any("helper connection could not be opened" in r.getMessage() and
               "no_such_database_for_rules_helpers" in r.getMessage() for r in caplog.records)

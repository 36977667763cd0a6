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

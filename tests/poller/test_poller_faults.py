"""Seeded fault injection for the poller: random combinations of outages, pruning, flaky answers, a lying host and
database drops (tests/support/faultplan.py), each run through real poll cycles against the devnet and PostgreSQL and
checked after every cycle and at the end (tests/support/faultrun.py).

``make test`` runs FAULT_SCENARIOS_DEFAULT seeds; ``FAULT_SCENARIOS=500 make test`` (or
``FAULT_SCENARIOS=500 .venv/bin/python -m pytest tests/poller/test_poller_faults.py``) runs more, and
``FAULT_FIRST_SEED=<n>`` starts the seeds there (default 1); ``FAULT_SEED=<n>`` runs one seed (the seed is in each test id and in every failure message).
"""
from __future__ import annotations

import os

import psycopg
import pytest

from indexer.db.scratch import scratch_database
from indexer.devnet import DevnetServer, FaultConfig
from indexer.poller import poll_once
from tests.support.faultplan import SHORT_RETAIN, Cycle, Plan, draw_plan, scenario, simulate
from tests.support.faultrun import policy, check_final, clean_run, run_plan, snapshot, tables

FAULT_SCENARIOS_DEFAULT = 50


def _seeds() -> list[int]:
    if os.environ.get("FAULT_SEED"):
        return [int(os.environ["FAULT_SEED"])]
    first = int(os.environ.get("FAULT_FIRST_SEED") or 1)
    return list(range(first, first + int(os.environ.get("FAULT_SCENARIOS") or FAULT_SCENARIOS_DEFAULT)))


@pytest.fixture(scope="module")
def reference(pg_admin_url, template_db):
    """Clean-run tables per shape (each shape polled once, the first time a scenario needs it)."""
    cache: dict[str, tuple] = {}

    def get(shape: str):
        if shape not in cache:
            with scratch_database(pg_admin_url, "indexer_ref", template=template_db) as url:
                clean_run(url, shape)
                cols = tables(url)
                cache[shape] = (snapshot(url, cols), cols)
        return cache[shape]

    return get


@pytest.mark.parametrize("seed", _seeds())
def test_fault_scenario(seed, db_url, reference):
    plan = draw_plan(seed)
    clean, cols = reference(plan.shape)
    run_plan(db_url, plan)
    check_final(db_url, plan, clean, cols)


def _run(db_url, reference, plan: Plan) -> None:
    clean, cols = reference(plan.shape)
    run_plan(db_url, plan)
    check_final(db_url, plan, clean, cols)


def test_group_that_never_answers(db_url, reference):
    """Every member of one escrow's group is down for good: that escrow fails every cycle (visibly) until it is
    pruned, and every other escrow is captured as in a clean run (issue 9: one failing escrow crashed each cycle)."""
    scn = scenario("a")
    victim = scn.epochs[0].escrows[0]
    first = scn.epochs[0].epoch_index
    down = frozenset(victim.slots)
    plan = Plan(0, "a", 1, FaultConfig(), {"escrow_workers": 3, "payload_workers": 4, "decode_workers": 0},
                [Cycle(first + k, down_hosts=down) for k in range(len(scn.epochs) + 3)])
    _run(db_url, reference, plan)
    with psycopg.connect(db_url) as c:
        err = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s",
                        (f"escrow:{victim.escrow_id}",)).fetchone()[0]
    assert err and "pruned" in err


@pytest.mark.parametrize("captured_first", [False, True], ids=["never-captured", "captured-open"])
def test_escrow_pruned_when_fetched(db_url, reference, captured_first):
    """The epoch ticks between the cycle's listing and its fetch: the chain answers found:false for an escrow
    of the oldest epoch, which has stored rows (captured while open) or none (its hosts were down before)."""
    scn = scenario("b")
    first = scn.epochs[0].epoch_index
    victim = scn.epochs[0].escrows[0]
    down = frozenset() if captured_first else frozenset(victim.slots)
    plan = Plan(0, "b", 1, FaultConfig(), {"escrow_workers": 1, "payload_workers": 0, "decode_workers": 0},
                [Cycle(first, down_hosts=down), Cycle(first + 2, prune_early=(victim.escrow_id,))]
                + [Cycle(first + k) for k in range(3, len(scn.epochs) + 3)])
    _run(db_url, reference, plan)


def test_failed_cycle_is_recorded_and_the_next_one_resumes(db_url, reference):
    """The database drops the poller's connection in the middle of its first escrow commit."""
    scn = scenario("a")
    first = scn.epochs[0].epoch_index
    cycles = [Cycle(first), Cycle(first + 1, db_drop=("main", 3)), Cycle(first + 1, resume=True)]
    cycles += [Cycle(first + k) for k in range(2, len(scn.epochs) + 3)]
    _run(db_url, reference, Plan(0, "a", 2, FaultConfig(), {"escrow_workers": 3, "payload_workers": 4,
                                                           "decode_workers": 0}, cycles))


def test_chain_failover_first_node_down(db_url):
    """Several chain URLs, the first one down: every request fails over and the cycle matches a clean one."""
    scn = scenario("b")
    with DevnetServer(scn, faults=FaultConfig(nodes_down=(0,))) as net:
        summary = poll_once(db_url, net.chain_rest_urls(2), net.rpc_urls(2), policy=policy(), decode_workers=0,
                            private_hosts=True)
        assert net.faults.injected["down"] >= 2  # chain REST and RPC each tried node 0 first
    assert summary.escrows == len(scn.epochs[0].escrows)


def test_settlement_race(db_url, reference):
    """The epoch ticks right after the cycle's settlement search (issue 37: a poll while the chain advances): each
    escrow of the cycle's current epoch is found settled with no settlement in what the cycle read, whether it was
    captured open before (409) or not (408). Each gets its settlement height before it is final, so the escrow rows
    and the restitution (SPRT in settlement order) are a clean run's."""
    scn = scenario("a")
    first = scn.epochs[0].epoch_index
    workers = {"escrow_workers": 3, "payload_workers": 4, "decode_workers": 0}
    cycles = [Cycle(first, tick=True), Cycle(first + 1), Cycle(first + 1, tick=True)]
    cycles += [Cycle(first + k) for k in range(2, len(scn.epochs) + 3)]
    plan = Plan(0, "a", 1, FaultConfig(), workers, cycles)
    cap = simulate(plan)
    assert cap.full == set(scn.escrows) and cap.exact_params == {e.epoch_index for e in scn.epochs}
    _run(db_url, reference, plan)


def test_snapshot_race(db_url, reference):
    """Every exact reading of an epoch's parameters is followed by inexact ones: the same clock on a node that keeps
    only a short stretch of state, then the next clock (the epoch's last height pruned). The exact snapshot stays,
    and the restitution on it is a clean run's."""
    scn = scenario("b")
    first = scn.epochs[0].epoch_index
    cycles = [Cycle(first)]
    for k in range(1, len(scn.epochs) + 3):
        cycles += [Cycle(first + k), Cycle(first + k, retain=SHORT_RETAIN)]
    plan = Plan(0, "b", 1, FaultConfig(), {"escrow_workers": 1, "payload_workers": 0, "decode_workers": 0}, cycles)
    assert simulate(plan).exact_params == {e.epoch_index for e in scn.epochs}
    _run(db_url, reference, plan)

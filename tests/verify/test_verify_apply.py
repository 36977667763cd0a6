"""How a session applies a diff cheaply: the rollback journal (records and host stats copied on first write), the
no-rollback mode of verification, and the per-record entry cache of the root."""
from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from indexer.verify import apply, state_root as sr
from tests.support.verify_kit import VECTORS, after, error_miss, finish, script, session, start, timeout, v5


def _snapshot(s: apply.Session):
    return copy.deepcopy((s.state, s.latest_nonce, s.finalize_nonce, s.sealed_nonces, s.stopped))


@pytest.mark.parametrize("done, txs", [
    (2, [finish(1), {"kind": "finish", "inference_id": 9}]),  # a record and host stats written, then a refusal
    (13, [start(14), {"kind": "noop"}]),  # the start would have sealed inference 8
    (19, [timeout(19, apply.EXECUTION), start(21)]),  # a timeout refunded and counted, then a bad start
    (28, [{"kind": "finalize"}, start(30)]),
])
def test_a_refused_diff_leaves_every_part_of_the_session_as_it_was(done, txs):
    s = after(done)
    before, root = _snapshot(s), s.root()
    with pytest.raises(apply.ApplyError):
        s.apply(done + 1, txs)
    assert _snapshot(s) == before and s.root() == root
    # and the session goes on exactly as the untouched one
    fresh = after(done)
    for nonce, step in enumerate(script()[done:], start=done + 1):
        assert s.apply(nonce, step) == fresh.apply(nonce, step)


def test_a_refused_v5_diff_restores_the_height_sync_commit_and_an_error_miss():
    s = v5(3)
    before = _snapshot(s)
    turn = {"kind": "force_height_sync_turn", "trigger_nonce": 4, "end_nonce": 8, "anchor_k": 10, "slots_num": 5,
            "reason": "x"}
    with pytest.raises(apply.ApplyError, match="tx 3 \\(noop\\)"):
        s.apply(4, [turn, error_miss(1), {"kind": "heartbeat", "turn_seq": 1}, {"kind": "noop"}])
    assert _snapshot(s) == before


def test_without_rollback_the_roots_are_the_same_and_a_refusal_stops_the_session():
    roots = json.loads(VECTORS.read_text())
    s = session()
    for nonce, txs in enumerate(script(), start=1):
        assert s.apply(nonce, txs, rollback=False).hex() == roots[nonce]
    s = after(2)
    with pytest.raises(apply.ApplyError, match="nonce 3 tx 0 \\(finish\\): executor slot 2"):
        s.apply(3, [{**finish(1), "executor_slot": 2}], rollback=False)
    assert s.stopped.startswith("nonce 3: nonce 3 tx 0 (finish)")
    for rollback in (True, False):
        with pytest.raises(apply.ApplyError, match="nonce 3: the session stopped at an earlier refusal \\(nonce 3"):
            s.apply(3, [finish(1)], rollback=rollback)


def test_the_entry_cache_never_serves_a_record_changed_in_place():
    s = after(3)
    live = s.state.live
    assert s.root() == sr.state_root(s.state)
    assert sr.live_hash(live, None, s.state.entry_cache) == sr.live_hash(live)
    live[1].output_tokens += 1  # changed behind the session's back
    assert sr.live_hash(live, None, s.state.entry_cache) == sr.live_hash(live)
    many = {i: sr.Record(status=sr.PENDING, executor_slot=0, started_at=i) for i in range(1, 200)}
    cache: dict = {}
    sr.live_hash(many, None, cache)
    assert len(cache) == 199
    few = {i: many[i] for i in range(1, 10)}
    assert sr.live_hash(few, None, cache) == sr.live_hash(few) and sorted(cache) == list(range(1, 10))


def _uncached_root(state: sr.State) -> bytes:
    """The root of ``state`` computed in a State with empty caches."""
    return sr.state_root(sr.State(**{f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.compare}))


def test_the_root_caches_never_serve_host_stats_records_or_warm_keys_changed_in_place():
    s = after(3)
    roots = [s.root()]
    assert roots[0] == _uncached_root(s.state)  # every cache filled
    s.state.host_stats[1].missed += 1  # changed behind the session's back
    roots.append(s.root())
    # objects put in the place of others (the new ones' write counts may equal the old ones')
    s.state.host_stats[2] = sr.HostStats(**{**dataclasses.asdict(s.state.host_stats[2]), "cost": 7})
    roots.append(s.root())
    s.state.live[1] = sr.Record(**{**dataclasses.asdict(s.state.live[1]), "output_tokens": 99})
    roots.append(s.root())
    s.state.warm_keys[0] = "gonka1warm"
    roots.append(s.root())
    assert roots[-1] == _uncached_root(s.state) and len(set(roots)) == len(roots)

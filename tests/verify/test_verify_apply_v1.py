"""The v1 session rules (gonka-ai/gonka devshard/state/machine.go, hash.go, composition.go @01dfd416: the flat root of
the builds before the sealed accumulator): the v4.1 release fixture replayed under v1, the drain that changes
nothing, and what a v1 diff may not carry."""
from __future__ import annotations

import dataclasses

import pytest

from indexer.verify import apply, diff, proto as pb, state_root as sr
from tests.support.verify_kit import (CONFIG, ESCROW, HOSTS, after, confirm, diff_content, error_miss, script,
                                      start)


def v1_root_of(state: sr.State) -> bytes:
    """The v1 root by hash.go @01dfd416 computeRestHash, written out here: no accumulator, no height term."""
    rest = sr.sha256(state.balance.to_bytes(8, "big") + sr.live_hash(state.live) + sr.warm_keys_hash(state.warm_keys))
    return sr.root_from_rest(sr.host_stats_hash(state.host_stats), rest, state.fees, state.phase, "v1")


def test_the_v41_fixture_under_v1_keeps_every_record_and_the_same_books():
    """The fixture's txs touch no record after v4.1 seals it, so both lines keep the same balance, fees and host
    stats at every nonce; v1 never seals, so its root covers every record ever started."""
    old, new = after(0), after(0, "v1")
    started = set()
    for nonce, txs in enumerate(script(), start=1):
        old.apply(nonce, txs)
        started |= {t["inference_id"] for t in txs if t["kind"] == "start"}
        assert new.apply(nonce, txs) == v1_root_of(new.state), f"nonce {nonce}"
        assert (new.state.balance, new.state.fees, new.state.host_stats) == (
            old.state.balance, old.state.fees, old.state.host_stats)
        assert set(new.state.live) == started and not new.sealed_nonces and new.state.sealed_acc == sr.ZERO32
    assert new.state.phase == sr.SETTLEMENT and sorted(started) == [1, 4, 8, 14, 19, 22]


def test_the_v1_drain_leaves_pending_and_started_records_as_they_are():
    s = after(0, "v1")
    for nonce, txs in enumerate([[start(1)], [start(2)], [confirm(1)], [{"kind": "finalize"}]] + [[]] * 5, 1):
        s.apply(nonce, txs)
    assert s.state.phase == sr.SETTLEMENT
    assert [s.state.live[i].status for i in (1, 2)] == [sr.STARTED, sr.PENDING]
    assert s.state.host_stats[1].cost == 0 and s.state.balance == 1_000_000 - 300


def test_a_v1_session_needs_no_seal_interval():
    s = apply.Session.new(ESCROW, dataclasses.replace(CONFIG, auto_seal_every=0), tuple(HOSTS), 1_000, "v1")
    assert s.apply(1, [start(1)]) == v1_root_of(s.state)


def test_a_v1_diff_carries_no_v5_tx_and_no_field_5():
    with pytest.raises(apply.ApplyError, match="tx kind 'error_miss' is not in the v1 rules"):
        after(3, "v1").apply(4, [error_miss(1)])
    sealed = diff_content(1, [], bytes(32)) + pb.f_bytes(5, pb.uvarint(3))
    with pytest.raises(diff.DiffError, match="field 5 \\(sealed_inference_ids\\) is not in the DiffContent of "
                                             "protocol version 'v1'"):
        diff.read_diff_content(sealed, "v1")

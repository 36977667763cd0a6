"""State roots against upstream vectors: the 35 v4.1 release roots of gonka-ai/gonka @bb34d444 (fixture in
tests/support/verify_kit.py), then every rule the state machine enforces and every version composition."""
from __future__ import annotations

import json

import coincurve
import pytest

from indexer.verify import apply, signatures as sig, state_root as sr
from tests.support.verify_kit import (CONFIG, ESCROW, HOSTS, VECTORS, after, confirm, finish, script, session, start,
                                      timeout, validation, vote)


def test_all_35_v41_release_roots_reproduce():
    roots = json.loads(VECTORS.read_text())
    steps = script()
    assert len(roots) == len(steps) + 1 == 35
    s = session()
    assert s.root().hex() == roots[0]
    for nonce, txs in enumerate(steps, start=1):
        assert s.apply(nonce, txs).hex() == roots[nonce], f"nonce {nonce}"
    assert s.state.phase == sr.SETTLEMENT and not s.state.live
    assert sorted(s.sealed_nonces) == [1, 4, 8, 14, 19, 22]


WARM = sig.address_of_pubkey(coincurve.PrivateKey.from_int(99).public_key.format())


@pytest.mark.parametrize("done, txs, message", [
    (0, [start(1), start(1)], "at most one start"),
    (0, [start(2)], "inference_id == nonce"),
    (0, [{"kind": "start", "inference_id": 1}], "tx 0 \\(start\\): 'input_length'"),
    (0, [confirm(1)], "inference 1 is unknown"),
    (0, [{**start(1), "input_length": 2**64 - 1}], "overflows uint64"),
    (1, [confirm(1), confirm(1)], "tx 1 .*confirm needs Pending"),
    (1, [finish(1)], "finish needs Started"),
    (2, [{**finish(1), "executor_slot": 2}], "executor slot 2, record's is 1"),
    (2, [{**finish(1), "escrow_id": "other"}], "escrow id 'other'"),
    (2, [{**finish(1), "signer": HOSTS[2]}], "slot 1: signed by .*neither"),
    (3, [validation(1, 1, True)], "cannot validate its own"),
    (3, [{**validation(1, 0, True), "validator_slot": 7}], "slot 7 is not in the group of 5"),
    (2, [validation(1, 0, True)], "validation needs Finished"),
    (3, [{**validation(1, 0, True), "escrow_id": "x"}], "escrow id 'x'"),
    (11, [vote(8, 4, True)], "its address already voted"),
    (11, [{**vote(8, 0, True), "escrow_id": "x"}], "escrow id 'x'"),
    (3, [vote(1, 0, True)], "vote needs Challenged"),
    (7, [vote(4, 1, True)], "vote needs Challenged"),
    (11, [vote(99, 0, True)], "inference 99 is unknown"),
    (14, [vote(8, 2, True)], "inference 8 is sealed"),
    (20, [{**timeout(19, apply.EXECUTION), "votes": [(0, True, HOSTS[0])]}], "need more than 1 accept votes, got 1"),
    (20, [{**timeout(19, apply.EXECUTION), "votes": [(0, True, HOSTS[0]), (0, True, HOSTS[0])]}], "already voted"),
    (20, [timeout(19, apply.REFUSED)], "reason 1 does not fit status 1"),
    (29, [{"kind": "finalize"}], "already finalizing"),
    (29, [start(30)], "session is finalizing"),
    (3, [start(4), {"kind": "noop"}], "tx 1 \\(noop\\): tx kind .noop. is not in the v4.1 rules"),
])
def test_refused_diffs_name_the_rule_and_leave_the_session_unchanged(done, txs, message):
    s = after(done)
    before = (s.root(), s.latest_nonce, dict(s.sealed_nonces))
    with pytest.raises(apply.ApplyError, match=message):
        s.apply(done + 1, txs)
    assert (s.root(), s.latest_nonce, dict(s.sealed_nonces)) == before


def test_a_wrong_nonce_and_a_duplicate_id_are_refused():
    s = after(3)
    with pytest.raises(apply.ApplyError, match="nonce 5: expected 4"):
        s.apply(5, [])
    s.state.live.pop(1)
    s.sealed_nonces[4] = 2  # an id already sealed cannot start again
    with pytest.raises(apply.ApplyError, match="duplicate inference id 4"):
        s.apply(4, [start(4)])


def test_balance_limits_are_enforced():
    with pytest.raises(apply.ApplyError, match="balance 149 below the reservation 150"):
        after(1, balance=149)
    fee = apply.Config(token_price=1, vote_threshold=1, seal_grace_nonces=6, seal_grace_seconds=3600, fee_per_nonce=10)
    s = after(0, config=fee, balance=165)
    s.apply(1, [start(1)])
    assert (s.state.balance, s.state.fees) == (5, 10)
    with pytest.raises(apply.ApplyError, match="nonce 2: balance 5 below the per-nonce fee"):
        s.apply(2, [])


def test_a_warm_key_is_bound_once_and_enters_the_root():
    allowed = {(1, WARM)}
    s = after(1, warm_resolver=lambda slot, addr: (slot, addr) in allowed)
    before = s.root()
    s.apply(2, [{**confirm(1), "signer": WARM}])
    assert s.state.warm_keys == {1: WARM}
    cold = after(2)
    assert s.root() != cold.root()  # same records, the warm key binding is committed
    assert sr.warm_keys_hash({1: WARM}) != sr.warm_keys_hash({})
    other = sig.address_of_pubkey(coincurve.PrivateKey.from_int(98).public_key.format())
    allowed.add((1, other))
    with pytest.raises(apply.ApplyError, match="its warm key is"):
        s.apply(3, [{**finish(1), "signer": other}])
    s.apply(3, [{**finish(1), "signer": WARM}])
    assert before != s.root()
    with pytest.raises(apply.ApplyError, match="neither"):
        after(1).apply(2, [{**confirm(1), "signer": WARM}])  # no resolver: a warm key is refused


def test_settlement_drain_pays_started_and_refunds_pending():
    s = after(0)
    s.apply(1, [start(1)])
    s.apply(2, [start(2)])
    s.apply(3, [confirm(1)])
    s.apply(4, [{"kind": "finalize"}])
    for nonce in range(5, 9):
        s.apply(nonce, [])
    assert s.state.phase == sr.FINALIZING and sorted(s.state.live) == [1, 2]
    s.apply(9, [])
    assert s.state.phase == sr.SETTLEMENT and not s.state.live
    assert s.state.host_stats[1].cost == 150 and s.state.balance == 1_000_000 - 150


def test_versions_compose_as_upstream_and_unknown_ones_are_refused():
    base = after(0).state
    v41 = sr.state_root(base)
    assert v41.hex() == json.loads(VECTORS.read_text())[0]
    zero = sr.height_sync_hash(sr.HeightSyncCommit())
    assert zero.hex().startswith("7955cb2d") and zero.hex().endswith("2f7a")  # gonka-devshard.md 4.8
    v5 = sr.State(**{**base.__dict__, "version": "v5"})
    assert sr.state_root(v5) == sr.root_from_rest(
        sr.host_stats_hash(base.host_stats),
        sr.sha256((1_000_000).to_bytes(8, "big") + sr.sha256(bytes(32) + sr.sha256(b"")) + sr.sha256(b"") + zero),
        0, 0, "v5")
    v1 = sr.State(**{**base.__dict__, "version": "v1"})
    assert sr.rest_hash(v1) == sr.sha256((1_000_000).to_bytes(8, "big") + sr.sha256(b"") + sr.sha256(b""))
    for tag in ("v2", "v3", "v4", "", "v6"):
        with pytest.raises(sr.UnsupportedVersion, match=f"composition of protocol version '{tag}' is not established"):
            sr.state_root(sr.State(**{**base.__dict__, "version": tag}))
    named = sr.State(**{**base.__dict__, "version": "v4", "composition": (True, False)})
    assert sr.rest_hash(named) == sr.rest_hash(base) and sr.state_root(named) != v41  # only the version hash differs
    with pytest.raises(sr.UnsupportedVersion, match="sealed accumulator exists only"):
        sr.state_root(sr.State(**{**base.__dict__, "version": "v1", "sealed_acc": b"\x01" * 32}))
    with pytest.raises(sr.UnsupportedVersion, match="height sync exists only from v5"):
        sr.state_root(sr.State(**{**base.__dict__, "height_sync": sr.HeightSyncCommit(turn_k=1)}))


def test_out_of_range_values_are_refused():
    base = after(0).state
    with pytest.raises(ValueError, match="balance -1 does not fit in uint64"):
        sr.state_root(sr.State(**{**base.__dict__, "balance": -1}))
    with pytest.raises(ValueError, match="phase 3"):
        sr.root_from_rest(bytes(32), bytes(32), 0, 3, "v4.1")
    with pytest.raises(ValueError, match="wider than 128 bits"):
        sr.record_entry(1, sr.Record(status=0, executor_slot=0, validated_by=1 << 128))


def test_a_vote_on_a_resolved_record_is_a_no_op():
    roots = json.loads(VECTORS.read_text())
    s = after(13)
    assert s.apply(14, [start(14), vote(8, 2, True)]).hex() == roots[14]


def test_session_construction_refuses_what_it_cannot_follow():
    for version in ("v2", "v6", "v4"):
        with pytest.raises(sr.UnsupportedVersion, match=f"session rules of protocol version '{version}' are not"):
            session(version)
    with pytest.raises(apply.ApplyError, match="no slots"):
        apply.Session.new(ESCROW, CONFIG, (), 10, "v4.1")
    zero = apply.Config(token_price=1, vote_threshold=1, seal_grace_nonces=6, seal_grace_seconds=3600,
                        auto_seal_every=0)
    with pytest.raises(apply.ApplyError, match="auto_seal_every must be a positive interval"):
        apply.Session.new(ESCROW, zero, tuple(HOSTS), 10, "v4.1")
    fee = apply.Config(token_price=1, vote_threshold=1, seal_grace_nonces=6, seal_grace_seconds=3600, create_fee=11)
    with pytest.raises(apply.ApplyError, match="create devshard fee 11 exceeds escrow amount 10"):
        apply.Session.new(ESCROW, fee, tuple(HOSTS), 10, "v4.1")
    s = apply.Session.new(ESCROW, fee, tuple(HOSTS), 1_000, "v4.1")
    assert (s.state.balance, s.state.fees) == (989, 11)

"""The v5 session rules (gonka-ai/gonka devshard/state @c6c474aa, seal.go @0998aad5): the v4.1 release fixture replayed
under v5, then each rule v5 adds or changes: height sync, error-miss, the drain of Pending records, the seal clock,
block-height stamps."""
from __future__ import annotations

import dataclasses
import json

import pytest

from indexer.verify import apply, apply_txs, proto as pb, signatures as sig, state_root as sr, versions
from tests.support.verify_kit import (CONFIG, ESCROW, HOSTS, V5_CONFIG, VECTORS, after, confirm, error_miss, finish,
                                      script, sign_by, start, v5)


def v5_root_of(state: sr.State) -> bytes:
    """The v5 root of a state by the formula of hash.go @c6c474aa, written out here independently."""
    inferences = sr.sha256(state.sealed_acc + sr.live_hash(state.live))
    rest = sr.sha256(state.balance.to_bytes(8, "big") + inferences + sr.warm_keys_hash(state.warm_keys)
                     + sr.height_sync_hash(state.height_sync))
    return sr.root_from_rest(sr.host_stats_hash(state.host_stats), rest, state.fees, state.phase, "v5")


def test_the_v41_release_fixture_replays_under_v5_with_the_v5_root():
    """The fixture has no Pending record at the drain and an execution timeout of 0, so v5 reaches the same states as
    v4.1 (whose 35 roots are the upstream vectors); each v5 root is then that state under the v5 composition."""
    roots = json.loads(VECTORS.read_text())
    old, new = after(0), v5()
    for nonce, txs in enumerate(script(), start=1):
        assert old.apply(nonce, txs).hex() == roots[nonce]
        assert new.apply(nonce, txs) == v5_root_of(old.state) != bytes.fromhex(roots[nonce]), f"nonce {nonce}"
    assert new.state.phase == sr.SETTLEMENT and new.sealed_nonces == old.sealed_nonces


def test_an_error_miss_refunds_the_client_unpays_the_host_and_counts_a_miss():
    s = v5(3)  # inference 1 finished on slot 1: cost 120 of a 150 reservation
    assert (s.state.balance, s.state.host_stats[1].cost) == (1_000_000 - 120, 120)
    root = s.apply(4, [error_miss(1)])
    rec, hs = s.state.live[1], s.state.host_stats[1]
    assert (rec.status, hs.missed, hs.cost, s.state.balance) == (sr.TIMED_OUT, 1, 0, 1_000_000)
    assert root == v5_root_of(s.state)


@pytest.mark.parametrize("done, tx, message", [
    (2, error_miss(1), "error-miss needs Finished, record is 1"),
    (3, error_miss(1, slots=(2,)), "need more than 1 accept votes, got 1"),
    (3, error_miss(1, accept=False), "need more than 1 accept votes, got 0"),
    (3, error_miss(1, slots=(2, 2)), "slot 2: its address already voted"),
    (3, error_miss(1, response_hash=b"other"), "slot 2: signed by gonka1.*neither"),
    (3, {**error_miss(1), "votes": [(2, True, b"short")]}, "vote from slot 2: signature is 5 bytes"),
    (3, error_miss(9), "inference 9 is unknown"),
])
def test_error_miss_refusals(done, tx, message):
    s = v5(done)
    before = s.root()
    with pytest.raises(apply.ApplyError, match=f"nonce {done + 1} tx 0 \\(error_miss\\): {message}"):
        s.apply(done + 1, [tx])
    assert s.root() == before and s.latest_nonce == done


def test_error_miss_is_not_a_v41_tx():
    with pytest.raises(apply.ApplyError, match="tx kind 'error_miss' is not in the v4.1 rules"):
        after(3).apply(4, [error_miss(1)])


def turn(nonce, end=None, k=10, slots=5, reason="operator"):
    return {"kind": "force_height_sync_turn", "trigger_nonce": nonce, "end_nonce": nonce + slots - 1 if end is None
            else end, "anchor_k": k, "slots_num": slots, "reason": reason}


def test_a_forced_turn_enters_the_root_swallows_the_cadence_tail_and_clears():
    s = v5()
    for nonce in range(1, 9):
        s.apply(nonce, [])
    quiet = s.state.height_sync
    assert quiet == sr.HeightSyncCommit()
    assert s.apply(9, [turn(9)]) == v5_root_of(s.state)
    # forced [9, 13] ends inside the anchor window [10, 14] of K = 10: the tail up to 14 is swallowed
    assert s.state.height_sync == sr.HeightSyncCommit(9, 13, 14, 13, 10, 5, "operator")
    s.apply(10, [turn(10)])  # a duplicate open while the turn covers the nonce is a no-op
    assert s.state.height_sync.forced_start == 9
    for nonce in range(11, 14):
        s.apply(nonce, [])
    assert s.state.height_sync.forced_end == 13
    s.apply(14, [])
    assert s.state.height_sync == sr.HeightSyncCommit(0, 0, 14, 13, 10, 5, "operator")
    s.apply(15, [])
    assert s.state.height_sync == quiet


def test_a_forced_turn_outside_an_anchor_window_swallows_nothing():
    assert apply_txs.cadence_swallow(10, 14, 8, 5) == (0, 0)
    assert apply_txs.cadence_swallow(9, 13, 10, 5) == (14, 13)
    assert apply_txs.cadence_swallow(9, 13, 4, 5) == (0, 0)  # K below the group size: no cadence


@pytest.mark.parametrize("tx, message", [
    (turn(2), "trigger_nonce 2 must equal the diff nonce 1"),
    (turn(1, slots=4), "slots_num 4 must equal the group size 5"),
    (turn(1, k=4), "anchor_k 4 below slots_num 5"),
    (turn(1, end=9), "end_nonce 9 must be trigger_nonce \\+ slots_num - 1"),
])
def test_forced_turn_refusals(tx, message):
    with pytest.raises(apply.ApplyError, match=f"nonce 1 tx 0 \\(force_height_sync_turn\\): {message}"):
        v5().apply(1, [tx])


def test_one_forced_turn_per_diff_and_none_once_finalizing():
    with pytest.raises(apply.ApplyError, match="nonce 1: at most one force_height_sync_turn"):
        v5().apply(1, [turn(1), turn(1)])
    s = v5()
    s.apply(1, [{"kind": "finalize"}])
    for kind, tx in (("force_height_sync_turn", turn(2)), ("heartbeat", {"kind": "heartbeat"}),
                     ("height_ack", {"kind": "height_ack"})):
        with pytest.raises(apply.ApplyError, match=f"tx 0 \\({kind}\\): session is finalizing"):
            s.apply(2, [tx])


def test_heartbeats_and_acks_are_admitted_without_touching_the_root():
    a, b = v5(), v5()
    assert a.apply(1, [{"kind": "heartbeat", "turn_seq": 1}, {"kind": "height_ack", "slot_id": 2}]) == b.apply(1, [])


def test_the_drain_pays_a_pending_record_in_v5_and_refunds_it_in_v41():
    def drained(version, config):
        s = apply.Session.new(ESCROW, config, tuple(HOSTS), 1_000_000, version)
        for nonce, txs in enumerate([[start(1)], [start(2)], [confirm(1)], [{"kind": "finalize"}]] + [[]] * 5, 1):
            s.apply(nonce, txs)
        assert s.state.phase == sr.SETTLEMENT
        return s.state
    old, new = drained("v4.1", CONFIG), drained("v5", V5_CONFIG)
    assert (old.host_stats[2].cost, old.balance) == (0, 1_000_000 - 150)
    assert (new.host_stats[2].cost, new.balance) == (150, 1_000_000 - 300)


def test_a_finished_record_waits_grace_plus_execution_timeout_in_v5():
    config = dataclasses.replace(CONFIG, seal_grace_seconds=0, seal_grace_nonces=1, execution_timeout=60)

    def run(version):
        s = apply.Session.new(ESCROW, config, tuple(HOSTS), 1_000_000, version)
        s.apply(1, [start(1)])
        s.apply(2, [{**confirm(1), "confirmed_at": 1000, "signer": HOSTS[1]}])
        s.apply(3, [finish(1), start(3)])
        s.apply(4, [{"kind": "confirm_start", "inference_id": 3, "confirmed_at": 1059, "signer": HOSTS[3]}])
        sealed_early = 1 in s.sealed_nonces
        s.apply(5, [start(5)])
        s.apply(6, [{"kind": "confirm_start", "inference_id": 5, "confirmed_at": 1060, "signer": HOSTS[0]}])
        return sealed_early, s.sealed_nonces.get(1)
    assert run("v4.1") == (True, 3)
    assert run("v5") == (False, 6)


def test_a_v5_session_needs_its_execution_timeout():
    with pytest.raises(versions.NotCheckable, match="execution_timeout must be stated"):
        apply.Session.new(ESCROW, CONFIG, tuple(HOSTS), 1_000, "v5")


STAMP = {"observed_height": 4242, "observed_block_hash": b"\x11" * 32}


def test_a_stamped_start_is_kept_in_v5_and_its_root_needs_the_field_numbers():
    s = v5()
    with pytest.raises(sr.UnsupportedVersion, match="inference 1 carries a block-height stamp .*started_at_height "
                                                    "4242.*no stored upstream state.proto"):
        s.apply(1, [{**start(1), **STAMP}])
    assert s.latest_nonce == 0
    old = after(0)
    old.apply(1, [{**start(1), **STAMP}])
    assert old.state.live[1].started_at_height == 0  # v4.1 records keep no height
    named = versions.with_height_fields(versions.V5, record=(18, 19), receipt=(9, 10))
    s = v5(rules=named)
    s.apply(1, [{**start(1), **STAMP}])
    assert s.state.live[1].started_at_height == 4242
    assert sr.record_entry(1, s.state.live[1], (18, 19)).endswith(pb.f_bytes(17, bytes(16)) + pb.f_uint(18, 4242))
    with pytest.raises(sr.UnsupportedVersion, match="the v4.1 rules keep no block-height stamps"):
        versions.with_height_fields(versions.V41, (18, 19), (9, 10))


def test_a_stamped_confirm_receipt_needs_the_field_numbers():
    receipt = dict(inference_id=1, prompt_hash=b"prompt", model="llama", input_length=100, max_tokens=50,
                   started_at=1000, escrow_id=ESCROW, confirmed_at=1000, observed_height=4242,
                   observed_block_hash=b"\x11" * 32, height_fields=(9, 10))
    tx = {"kind": "confirm_start", "inference_id": 1, "confirmed_at": 1000, **STAMP,
          "executor_sig": sign_by(1, sig.executor_receipt_bytes(**receipt))}
    s = v5(1)
    with pytest.raises(sr.UnsupportedVersion, match="the confirm of inference 1 signs a block-height stamp"):
        s.apply(2, [tx])
    named = versions.with_height_fields(versions.V5, record=(18, 19), receipt=(9, 10))
    s = v5(1, rules=named)
    s.apply(2, [tx])
    assert (s.state.live[1].status, s.state.live[1].confirmed_at_height) == (sr.STARTED, 4242)
    with pytest.raises(ValueError, match="needs the stamp's field numbers"):
        sig.executor_receipt_bytes(**{**receipt, "height_fields": None})

"""Tests for the pure devshard replay machine (gonka-devshard.md §1.2, §1.3, §3.1-§3.5, §7 F6-F9).

No database: these tests use no conftest fixtures.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.replay.machine import (
    KIND_ORDER,
    STATUSES,
    EscrowConfig,
    InferenceState,
    Rejection,
    Transition,
    Tx,
    replay,
    sort_key,
    vote_threshold,
)

# --- fixtures and tx builders --------------------------------------------------------------

A, B, C, D, E = (f"gonka1host{x}" for x in "ABCDE")
# Escrow 1971 (§7): A = 0-3, B = 4-5, C = 6-8, D = 9-10, E = 11-15.
SLOTS_1971 = (A,) * 4 + (B,) * 2 + (C,) * 3 + (D,) * 2 + (E,) * 5
# 16 distinct single-slot hosts.
SOLO16 = tuple(f"h{i}" for i in range(16))


def cfg(slots=SOLO16, factor=50, settled=False) -> EscrowConfig:
    return EscrowConfig("e1", tuple(slots), factor, settled)


def start(n):
    return Tx(n, "start", n)


def confirm(n, i):
    return Tx(n, "confirm_start", i)


def finish(n, i, slot, inp=10, out=5):
    return Tx(n, "finish", i, slot=slot, input_tokens=inp, output_tokens=out)


def validation(n, i, slot, valid):
    return Tx(n, "validation", i, slot=slot, valid=valid)


def vote(n, i, slot, valid):
    return Tx(n, "validation_vote", i, slot=slot, valid=valid)


def timeout(n, i, reason, voters, accept=True):
    return Tx(n, "timeout", i, reason=reason, votes=tuple((s, accept) for s in voters))


def error_miss(n, i, voters, accept=True):
    return Tx(n, "error_miss", i, votes=tuple((s, accept) for s in voters))


def finished_log(i, n_slots=16):
    """start / confirm / finish for inference i at nonces i, i+1, i+2."""
    return [start(i), confirm(i + 1, i), finish(i + 2, i, i % n_slots)]


def challenged_log(i, challenger, n_slots=16):
    return finished_log(i, n_slots) + [validation(i + 3, i, challenger, False)]


def reasons(result):
    return [r.reason for r in result.rejections]


# --- vote threshold (§3.1) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "factor", "expected"),
    [
        (16, 0, 8),
        (16, None, 8),
        (16, 50, 8),
        (16, 67, 10),
        (16, 100, 16),
        (16, 25, 4),
        (15, 0, 7),
        (15, 50, 7),
        (15, 67, 10),  # 1005 // 100
        (15, 100, 15),
        (7, 67, 4),  # 469 // 100
        (7, 0, 3),
        (3, 50, 1),
        (1, 0, 0),
        (1, 50, 0),
    ],
)
def test_vote_threshold(size, factor, expected):
    assert vote_threshold(size, factor) == expected


def test_threshold_is_reported_in_result():
    assert replay(cfg(factor=67), []).vote_threshold == 10
    assert replay(cfg(slots=SOLO16[:7], factor=67), []).vote_threshold == 4


@pytest.mark.parametrize(("factor", "threshold"), [(0, 8), (50, 8), (67, 10), (100, 16)])
def test_tally_resolves_exactly_above_threshold_for_each_factor(factor, threshold):
    # Challenger slot 1 (weight 1), then invalid votes from single-slot hosts until decided.
    voters = [s for s in range(2, 16)]
    txs = challenged_log(16, 1)  # executor slot 0
    for k, s in enumerate(voters):
        txs.append(vote(100 + k, 16, s, False))
    rec = replay(cfg(factor=factor), txs).inferences[16]
    if threshold >= 15:  # 15 slots besides the executor cannot exceed 16
        assert rec.status == "Challenged"
        assert rec.votes_invalid == 15
    else:
        assert rec.status == "Invalidated"
        assert rec.votes_invalid == threshold + 1
        assert rec.resolved_nonce == 100 + threshold - 1


def test_factor_100_is_reachable_only_with_every_slot():
    # With threshold == group size nothing can ever be decided.
    votes = list(range(16))
    txs = [start(0), timeout(1, 0, "refused", votes)]
    res = replay(cfg(factor=100), txs)
    assert res.inferences[0].status == "Pending"
    assert reasons(res) == ["insufficient_votes:16<=16"]


def test_odd_group_threshold_decides_at_floor_plus_one():
    slots = SOLO16[:7]  # factor 0 -> 3, decision needs 4
    base = [start(0)]
    three = replay(cfg(slots, 0), base + [timeout(1, 0, "refused", [1, 2, 3])])
    assert reasons(three) == ["insufficient_votes:3<=3"]
    four = replay(cfg(slots, 0), base + [timeout(1, 0, "refused", [1, 2, 3, 4])])
    assert four.inferences[0].status == "TimedOut"


# --- every status, transitions ---------------------------------------------------------------


def test_start_creates_pending_with_executor_from_modulo():
    res = replay(cfg(SLOTS_1971), [start(6149)])
    rec = res.inferences[6149]
    assert (rec.status, rec.executor_slot, rec.executor_address) == ("Pending", 5, B)
    assert rec.status_nonce == 6149
    assert res.transitions == [Transition(6149, 6149, None, "Pending", "start")]


def test_pending_started_finished_chain():
    res = replay(cfg(), finished_log(3))
    rec = res.inferences[3]
    assert rec.status == "Finished"
    assert rec.status_nonce == 5
    assert (rec.input_tokens, rec.output_tokens) == (10, 5)
    assert [(t.from_status, t.to_status, t.cause, t.diff_nonce) for t in res.transitions] == [
        (None, "Pending", "start", 3),
        ("Pending", "Started", "confirm_start", 4),
        ("Started", "Finished", "finish", 5),
    ]
    assert res.rejections == [] and res.ignored == []


def test_all_statuses_reachable():
    txs = (
        [start(0)]  # Pending
        + [start(1), confirm(2, 1)]  # Started
        + finished_log(16)  # Finished
        + challenged_log(32, 5)  # Challenged
        + challenged_log(48, 5) + [vote(60 + k, 48, 6 + k, True) for k in range(9)]  # Validated
        + challenged_log(64, 5) + [vote(70 + k, 64, 6 + k, False) for k in range(8)]  # Invalidated
        + [start(80), timeout(81, 80, "refused", range(1, 10))]  # TimedOut
    )
    res = replay(cfg(), txs)
    got = {i: r.status for i, r in res.inferences.items()}
    assert got == {
        0: "Pending",
        1: "Started",
        16: "Finished",
        32: "Challenged",
        48: "Validated",
        64: "Invalidated",
        80: "TimedOut",
    }
    assert set(got.values()) == set(STATUSES)
    assert res.rejections == []


def test_status_nonce_tracks_last_transition():
    res = replay(cfg(), challenged_log(16, 3))
    rec = res.inferences[16]
    assert rec.status_nonce == 19
    assert rec.challenged_nonce == 19 and rec.challenger_slot == 3


# --- start / confirm / finish ------------------------------------------------------------------


def test_duplicate_start_rejected_and_changes_nothing():
    res = replay(cfg(), [start(5), confirm(6, 5), Tx(5, "start", 5, slot=1)])
    assert reasons(res) == ["duplicate_start"]
    assert res.inferences[5].status == "Started"


def test_start_must_carry_its_diff_nonce():
    res = replay(cfg(), [Tx(7, "start", 8)])
    assert reasons(res) == ["inference_id_mismatch"]
    assert res.inferences == {}


def test_confirm_start_only_from_pending():
    res = replay(cfg(), [start(1), confirm(2, 1), confirm(3, 1)])
    assert reasons(res) == ["wrong_status:Started"]
    assert res.inferences[1].status_nonce == 2


def test_pending_cannot_take_finish():
    res = replay(cfg(), [start(1), finish(2, 1, 1)])
    assert reasons(res) == ["wrong_status:Pending"]
    assert res.inferences[1].status == "Pending"
    assert res.inferences[1].output_tokens is None


def test_finish_executor_slot_must_match():
    res = replay(cfg(), [start(1), confirm(2, 1), finish(3, 1, 2), finish(4, 1, 1)])
    assert reasons(res) == ["executor_slot_mismatch"]
    assert res.inferences[1].status_nonce == 4


def test_finish_twice_rejected():
    res = replay(cfg(), finished_log(1) + [finish(9, 1, 1)])
    assert reasons(res) == ["wrong_status:Finished"]


@pytest.mark.parametrize("bad", [16, -1, 99])
def test_slot_out_of_range(bad):
    txs = finished_log(1) + [validation(5, 1, bad, False), vote(6, 1, bad, False)]
    txs += [start(20), confirm(21, 20), finish(22, 20, bad)]
    res = replay(cfg(), txs)
    assert reasons(res) == ["slot_out_of_range"] * 3
    assert res.inferences[1].status == "Finished"
    assert res.inferences[20].status == "Started"


def test_missing_slot_rejected():
    res = replay(cfg(), finished_log(1) + [Tx(5, "validation", 1, valid=False)])
    assert reasons(res) == ["missing_slot"]


@pytest.mark.parametrize(
    "tx",
    [
        confirm(1, 9),
        finish(1, 9, 9),
        validation(1, 9, 2, True),
        vote(1, 9, 2, True),
        timeout(1, 9, "refused", range(16)),
        error_miss(1, 9, range(16)),
    ],
)
def test_unknown_inference(tx):
    res = replay(cfg(), [tx])
    assert reasons(res) == ["unknown_inference"]
    assert res.inferences == {} and res.transitions == []


def test_unknown_kind_rejected():
    res = replay(cfg(), [start(1), Tx(2, "reveal_seed", 1)])
    assert reasons(res) == ["unknown_kind"]


# --- MsgValidation (§3.2) ------------------------------------------------------------------------


def test_validation_needs_finished_or_later():
    txs = [start(1), validation(1, 1, 3, False), confirm(2, 1), validation(2, 1, 3, False)]
    res = replay(cfg(), txs)
    assert reasons(res) == ["wrong_status:Pending", "wrong_status:Started"]
    assert res.inferences[1].voted_addresses == set()


def test_validator_is_executor_rejected():
    res = replay(cfg(), finished_log(1) + [validation(5, 1, 1, False)])
    assert reasons(res) == ["validator_is_executor"]
    assert res.inferences[1].status == "Finished"


def test_validator_other_slot_of_executor_address_is_a_slot_rule():
    # The reference compares slots only; B's other slot may validate B's inference.
    res = replay(cfg(SLOTS_1971), finished_log(6149) + [validation(6160, 6149, 4, True)])
    assert res.rejections == []
    assert res.inferences[6149].votes_valid == 2


def test_valid_validation_adds_weight_without_resolving():
    # E holds 9 slots: its valid validation alone exceeds threshold 8 but never sets Validated.
    slots = ("E",) * 9 + tuple(f"x{i}" for i in range(7))
    res = replay(cfg(slots), finished_log(9) + [validation(30, 9, 3, True)])  # executor x0
    rec = res.inferences[9]
    assert (rec.status, rec.votes_valid, rec.votes_invalid) == ("Finished", 9, 0)
    assert rec.voted_addresses == {"E"}


def test_invalid_validation_challenges_but_never_resolves():
    slots = ("E",) * 9 + tuple(f"x{i}" for i in range(7))
    res = replay(cfg(slots), finished_log(9) + [validation(30, 9, 3, False)])  # executor x0
    rec = res.inferences[9]
    assert (rec.status, rec.votes_invalid, rec.penalty) == ("Challenged", 9, None)
    assert rec.challenged_nonce == 30 and rec.challenger_slot == 3
    assert rec.resolved_nonce is None
    assert res.slot_invalid[9] == 0


def test_validation_none_valid_reads_as_false():
    res = replay(cfg(), finished_log(1) + [Tx(5, "validation", 1, slot=3)])
    assert res.inferences[1].status == "Challenged"


def test_a_validation_from_an_address_that_validated_is_a_no_op():
    # applyValidation: "Idempotent: duplicate validation from same address is always a no-op" (before its status
    # gate), so the tx is accepted without effect, not refused
    txs = finished_log(6149) + [validation(6160, 6149, 11, True), validation(6161, 6149, 15, False)]
    res = replay(cfg(SLOTS_1971), txs)
    assert res.rejections == [] and [(r.reason, r.slot) for r in res.ignored] == [("ignored_duplicate", 15)]
    rec = res.inferences[6149]
    assert (rec.status, rec.votes_valid, rec.votes_invalid) == ("Finished", 5, 0)


def test_validation_after_challenge_adds_no_weight_but_blocks_vote():
    txs = challenged_log(1, 3) + [validation(10, 1, 4, True), vote(11, 1, 4, True)]
    res = replay(cfg(), txs)
    rec = res.inferences[1]
    assert (rec.votes_valid, rec.votes_invalid) == (0, 1)
    assert rec.voted_addresses == {"h3", "h4"}
    assert reasons(res) == ["duplicate_voter"]


def test_validation_on_resolved_record_is_accepted_without_weight():
    txs = challenged_log(16, 1) + [vote(30 + k, 16, 2 + k, False) for k in range(8)]
    txs.append(validation(50, 16, 12, True))
    res = replay(cfg(), txs)
    rec = res.inferences[16]
    assert rec.status == "Invalidated" and rec.votes_valid == 0
    assert "h12" in rec.voted_addresses
    assert res.rejections == [] and res.ignored == []


# --- MsgValidationVote (§3.3) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "status"),
    [([start(1)], "Pending"), ([start(1), confirm(2, 1)], "Started"), (finished_log(1), "Finished")],
)
def test_vote_needs_challenged(log, status):
    res = replay(cfg(), log + [vote(9, 1, 3, False)])
    assert reasons(res) == [f"wrong_status:{status}"]
    assert res.ignored == []


def test_vote_on_timed_out_is_an_error():
    res = replay(cfg(), [start(0), timeout(1, 0, "refused", range(1, 10)), vote(2, 0, 3, True)])
    assert reasons(res) == ["wrong_status:TimedOut"]


def test_equality_is_not_enough_then_one_more_decides():
    txs = challenged_log(16, 1) + [vote(30 + k, 16, 2 + k, False) for k in range(7)]
    res = replay(cfg(), txs)  # 1 + 7 = 8 == threshold
    assert res.inferences[16].status == "Challenged"
    assert res.inferences[16].votes_invalid == 8
    res = replay(cfg(), txs + [vote(40, 16, 12, False)])
    rec = res.inferences[16]
    assert (rec.status, rec.votes_invalid, rec.penalty, rec.resolved_nonce) == ("Invalidated", 9, "invalid", 40)
    assert res.slot_invalid[0] == 1


def test_valid_tally_validates_without_penalty():
    txs = challenged_log(16, 1) + [vote(30 + k, 16, 2 + k, True) for k in range(9)]
    res = replay(cfg(), txs)
    rec = res.inferences[16]
    assert (rec.status, rec.votes_valid, rec.votes_invalid, rec.penalty) == ("Validated", 9, 1, None)
    assert rec.resolved_nonce == 38 and rec.status_nonce == 38
    assert sum(res.slot_invalid.values()) == 0


def test_invalid_checked_first_when_vote_pushes_both_over():
    # factor 25 -> threshold 4. P (5 slots) validates valid while Finished: votes_valid 5 > 4,
    # unresolved. Q (1 slot) opens the challenge. R's invalid vote (4 slots) takes invalid to 5:
    # after that vote both sides exceed 4, and invalid wins.
    slots = ("X",) + ("P",) * 5 + ("Q",) + ("R",) * 4 + tuple(f"z{i}" for i in range(5))
    txs = finished_log(16) + [validation(30, 16, 1, True), validation(31, 16, 6, False), vote(32, 16, 7, False)]
    res = replay(cfg(slots, 25), txs)
    rec = res.inferences[16]
    assert (rec.votes_valid, rec.votes_invalid) == (5, 5)
    assert rec.status == "Invalidated"
    assert res.slot_invalid[0] == 1


def test_invalid_checked_first_even_on_a_valid_vote():
    # Both sides already exceed the threshold from validations; a *valid* vote triggers the
    # tally and the invalid side still wins.
    slots = ("X",) + ("P",) * 5 + ("Q",) * 5 + tuple(f"z{i}" for i in range(5))
    txs = finished_log(16) + [validation(30, 16, 1, True), validation(31, 16, 6, False)]
    res = replay(cfg(slots, 25), txs)
    assert res.inferences[16].status == "Challenged"  # validations never resolve
    res = replay(cfg(slots, 25), txs + [vote(32, 16, 11, True)])
    rec = res.inferences[16]
    assert (rec.status, rec.votes_valid, rec.votes_invalid) == ("Invalidated", 6, 5)


def test_duplicate_vote_by_address_rejected():
    # Challenger D at slot 9; D's other slot 10 cannot vote. A votes from slot 0, then slot 3.
    txs = challenged_log(6149, 9) + [vote(6170, 6149, 10, False), vote(6171, 6149, 0, False)]
    txs.append(vote(6172, 6149, 3, True))
    res = replay(cfg(SLOTS_1971), txs)
    assert [(r.reason, r.slot) for r in res.rejections] == [("duplicate_voter", 10), ("duplicate_voter", 3)]
    rec = res.inferences[6149]
    assert (rec.votes_valid, rec.votes_invalid) == (0, 6)


def test_votes_on_resolved_records_are_ignored_not_rejected():
    txs = challenged_log(16, 1) + [vote(30 + k, 16, 2 + k, True) for k in range(9)]
    txs += [vote(50, 16, 12, False), vote(51, 16, 2, False)]  # fresh voter, and a repeat voter
    res = replay(cfg(), txs)
    assert res.rejections == []
    assert [(r.reason, r.diff_nonce, r.slot) for r in res.ignored] == [
        ("ignored_resolved", 50, 12),
        ("ignored_resolved", 51, 2),
    ]
    rec = res.inferences[16]
    assert (rec.status, rec.votes_invalid, rec.resolved_nonce) == ("Validated", 1, 38)
    assert "h12" not in rec.voted_addresses


def test_vote_on_invalidated_is_ignored_and_counts_once():
    txs = challenged_log(16, 1) + [vote(30 + k, 16, 2 + k, False) for k in range(8)]
    txs.append(vote(50, 16, 13, False))
    res = replay(cfg(), txs)
    assert [r.reason for r in res.ignored] == ["ignored_resolved"]
    assert res.slot_invalid[0] == 1


def test_executor_may_vote_in_a_tally():
    # The reference forbids only validator_slot == executor_slot for MsgValidation.
    res = replay(cfg(), challenged_log(16, 1) + [vote(30, 16, 0, True)])
    assert res.rejections == []
    assert res.inferences[16].votes_valid == 1


# --- timeouts (§3.4) and error-misses (§3.5) -------------------------------------------------


def test_refused_timeout_from_pending():
    res = replay(cfg(), [start(2), timeout(3, 2, "refused", range(3, 12))])
    rec = res.inferences[2]
    assert (rec.status, rec.penalty, rec.timeout_reason, rec.status_nonce) == ("TimedOut", "missed", "refused", 3)
    assert res.slot_missed == {s: int(s == 2) for s in range(16)}
    assert res.transitions[-1] == Transition(2, 3, "Pending", "TimedOut", "timeout")


def test_execution_timeout_from_started():
    res = replay(cfg(), [start(2), confirm(3, 2), timeout(4, 2, "execution", range(3, 12))])
    rec = res.inferences[2]
    assert (rec.status, rec.timeout_reason) == ("TimedOut", "execution")
    assert res.slot_missed[2] == 1


@pytest.mark.parametrize(
    ("log", "reason", "status"),
    [
        ([start(2)], "execution", "Pending"),
        ([start(2), confirm(3, 2)], "refused", "Started"),
        (finished_log(2), "refused", "Finished"),
        (finished_log(2), "execution", "Finished"),
        (challenged_log(2, 5), "execution", "Challenged"),
    ],
)
def test_timeout_status_requirements(log, reason, status):
    res = replay(cfg(), log + [timeout(20, 2, reason, range(3, 16))])
    assert reasons(res) == [f"wrong_status:{status}"]
    assert res.inferences[2].status == status
    assert sum(res.slot_missed.values()) == 0


def test_timeout_at_threshold_rejected_over_threshold_applies():
    at = replay(cfg(), [start(0), timeout(1, 0, "refused", range(1, 9))])
    assert reasons(at) == ["insufficient_votes:8<=8"]
    assert at.inferences[0].status == "Pending"
    over = replay(cfg(), [start(0), timeout(1, 0, "refused", range(1, 10))])
    assert over.inferences[0].status == "TimedOut"


def test_reject_votes_do_not_count():
    votes = tuple((s, s < 9) for s in range(1, 16))  # 8 accept, 7 reject
    res = replay(cfg(), [start(0), Tx(1, "timeout", 0, reason="refused", votes=votes)])
    assert reasons(res) == ["insufficient_votes:8<=8"]


def test_timeout_vote_weights_and_address_dedup():
    # F9-like: A (4) + C (3) + D (2) = 9 > 8.
    res = replay(cfg(SLOTS_1971), [start(6165), timeout(6166, 6165, "refused", [0, 6, 9])])
    assert res.inferences[6165].status == "TimedOut"
    # A second slot of an address is refused, even when it only rejects.
    votes = ((0, True), (6, True), (9, True), (1, False))
    res = replay(cfg(SLOTS_1971), [start(6165), Tx(6166, "timeout", 6165, reason="refused", votes=votes)])
    assert reasons(res) == ["duplicate_vote_address"]
    assert res.inferences[6165].status == "Pending"


def test_timeout_vote_slot_out_of_range():
    res = replay(cfg(), [start(0), timeout(1, 0, "refused", list(range(1, 10)) + [16])])
    assert reasons(res) == ["slot_out_of_range"]


@pytest.mark.parametrize("reason", [None, "error", "REFUSED", ""])
def test_timeout_bad_reason(reason):
    res = replay(cfg(), [start(0), timeout(1, 0, reason, range(1, 16))])
    assert reasons(res) == ["bad_reason"]


def test_timeout_never_counts_twice():
    txs = [start(0), timeout(1, 0, "refused", range(1, 10)), timeout(2, 0, "refused", range(1, 10))]
    res = replay(cfg(), txs)
    assert reasons(res) == ["wrong_status:TimedOut"]
    assert res.slot_missed[0] == 1


def test_error_miss_from_finished():
    res = replay(cfg(), finished_log(3) + [error_miss(9, 3, range(4, 13))])
    rec = res.inferences[3]
    assert (rec.status, rec.penalty, rec.timeout_reason) == ("TimedOut", "missed", "error_miss")
    assert res.slot_missed[3] == 1
    assert res.transitions[-1].cause == "error_miss"


@pytest.mark.parametrize(
    ("log", "status"),
    [
        ([start(3)], "Pending"),
        ([start(3), confirm(4, 3)], "Started"),
        (challenged_log(3, 5), "Challenged"),
        (challenged_log(3, 5) + [vote(10 + k, 3, 6 + k, True) for k in range(9)], "Validated"),
    ],
)
def test_error_miss_only_from_finished(log, status):
    res = replay(cfg(), log + [error_miss(30, 3, range(4, 16))])
    assert reasons(res) == [f"wrong_status:{status}"]
    assert res.inferences[3].status == status


def test_error_miss_needs_strict_majority():
    res = replay(cfg(), finished_log(3) + [error_miss(9, 3, range(4, 12))])
    assert reasons(res) == ["insufficient_votes:8<=8"]
    assert res.inferences[3].status == "Finished"


# --- settlement drain -------------------------------------------------------------------------


def test_settlement_drain_finishes_live_records_without_miss():
    txs = [start(0), start(1), confirm(2, 1)] + challenged_log(16, 3)
    txs += [start(40), timeout(41, 40, "refused", range(1, 10))]
    res = replay(cfg(settled=True), txs)
    st_ = {i: r.status for i, r in res.inferences.items()}
    assert st_ == {0: "Finished", 1: "Finished", 16: "Challenged", 40: "TimedOut"}
    drained = [t for t in res.transitions if t.cause == "settlement_drain"]
    assert drained == [
        Transition(0, None, "Pending", "Finished", "settlement_drain"),
        Transition(1, None, "Started", "Finished", "settlement_drain"),
    ]
    assert res.inferences[0].status_nonce is None and res.inferences[0].penalty is None
    assert sum(res.slot_missed.values()) == 1


def test_no_drain_when_not_settled():
    res = replay(cfg(settled=False), [start(0)])
    assert res.inferences[0].status == "Pending"


# --- the reference scenario, escrow 1971 (§7 F5-F9) ------------------------------------------------

F_LOG = [
    start(6149),
    start(6150),
    confirm(6150, 6149),  # same diff as start(6150): several txs per diff
    confirm(6151, 6150),
    finish(6151, 6149, 5, 0, 0),  # F6: 0/0 client-fault Finish
    finish(6152, 6150, 6, 395905, 812),  # F5: the sibling
    start(6165),
    confirm(6166, 6165),
    validation(6170, 6149, 9, False),  # F7: D opens the challenge
    vote(6174, 6149, 11, True),  # E
    vote(6175, 6149, 0, False),  # A
    vote(6176, 6149, 6, False),  # C -> 9 > 8
    start(6179),
    confirm(6180, 6179),
    finish(6181, 6179, 3, 1000, 50),
    timeout(6190, 6165, "execution", [0, 6, 9, 11]),  # F9, weight 14
    error_miss(6201, 6179, [4, 6, 9, 11]),  # F9, weight 12
]


def test_reference_scenario_1971():
    res = replay(EscrowConfig("1971", SLOTS_1971, 50), F_LOG)
    assert res.vote_threshold == 8
    assert res.rejections == [] and res.ignored == []

    rec = res.inferences[6149]
    assert (rec.executor_slot, rec.executor_address) == (5, B)
    assert (rec.status, rec.votes_valid, rec.votes_invalid) == ("Invalidated", 5, 9)
    assert (rec.penalty, rec.resolved_nonce, rec.status_nonce) == ("invalid", 6176, 6176)
    assert (rec.challenged_nonce, rec.challenger_slot) == (6170, 9)
    assert rec.voted_addresses == {D, E, A, C}
    assert [(t.to_status, t.diff_nonce) for t in res.transitions if t.inference_id == 6149] == [
        ("Pending", 6149),
        ("Started", 6150),
        ("Finished", 6151),
        ("Challenged", 6170),
        ("Invalidated", 6176),
    ]

    sib = res.inferences[6150]
    assert (sib.status, sib.executor_slot, sib.executor_address, sib.input_tokens) == ("Finished", 6, C, 395905)

    to = res.inferences[6165]
    assert (to.executor_slot, to.status, to.timeout_reason, to.penalty) == (5, "TimedOut", "execution", "missed")
    em = res.inferences[6179]
    assert (em.executor_slot, em.executor_address, em.status, em.timeout_reason) == (3, A, "TimedOut", "error_miss")

    assert {s: n for s, n in res.slot_invalid.items() if n} == {5: 1}
    assert {s: n for s, n in res.slot_missed.items() if n} == {5: 1, 3: 1}


def test_reference_scenario_tally_steps():
    # After D and E only: invalid 2, valid 5; after A: invalid 6 -- still Challenged.
    upto = [tx for tx in F_LOG if tx.diff_nonce <= 6175]
    rec = replay(EscrowConfig("1971", SLOTS_1971, 50), upto).inferences[6149]
    assert (rec.status, rec.votes_valid, rec.votes_invalid) == ("Challenged", 5, 6)


def test_reference_scenario_input_order_does_not_matter():
    conf = EscrowConfig("1971", SLOTS_1971, 50)
    assert replay(conf, list(reversed(F_LOG))) == replay(conf, F_LOG)


# --- ordering -----------------------------------------------------------------------------------


def test_sort_key_orders_kinds_inside_a_diff():
    txs = [finish(5, 5, 5), confirm(5, 5), start(5)]
    res = replay(cfg(), txs)
    assert res.inferences[5].status == "Finished"
    assert [t.cause for t in res.transitions] == ["start", "confirm_start", "finish"]
    kinds = sorted(KIND_ORDER, key=KIND_ORDER.get)
    assert kinds == ["start", "confirm_start", "finish", "validation", "validation_vote", "timeout", "error_miss"]


def test_sort_key_primary_fields():
    a = Tx(3, "validation_vote", 1, slot=2, valid=True)
    b = Tx(3, "validation", 9, slot=7, valid=True)
    c = Tx(2, "error_miss", 50)
    d = Tx(3, "validation_vote", 1, slot=None, valid=True)
    assert sorted([a, b, c, d], key=sort_key) == [c, b, d, a]
    assert sort_key(a)[:5] == (3, (0,), KIND_ORDER["validation_vote"], "validation_vote", 1)  # no tx_index
    assert sort_key(a._replace(tx_index=1)) < sort_key(b._replace(tx_index=2))  # tx_index before kind


def test_within_diff_vote_order_by_slot_decides_tally():
    # Two votes in one diff: slot order decides which lands first, whatever the input order.
    txs = challenged_log(16, 1) + [vote(30 + k, 16, 2 + k, False) for k in range(7)]
    last = [vote(40, 16, 12, False), vote(40, 16, 11, True)]
    one = replay(cfg(), txs + last)
    two = replay(cfg(), txs + last[::-1])
    assert one == two
    assert one.inferences[16].resolved_nonce == 40
    assert one.inferences[16].votes_valid == 1  # slot 11 (valid) landed first, then 12 resolved



def test_lookalike_txs_in_one_diff_have_a_total_order():
    # Same (nonce, kind, id, slot) but different content: the input order must not pick the winner.
    pair = [validation(9, 1, 3, True), validation(9, 1, 3, False)]
    one, two = (replay(cfg(), finished_log(1) + p) for p in (pair, pair[::-1]))
    assert one == two
    assert reasons(one) == [] and [r.reason for r in one.ignored] == ["ignored_duplicate"]
    weak, strong = timeout(9, 2, "refused", [3]), timeout(9, 2, "refused", range(3, 12))
    one, two = (replay(cfg(), [start(2)] + p) for p in ([weak, strong], [strong, weak]))
    assert one == two
    assert one.inferences[2].status == "TimedOut"

# --- property tests -----------------------------------------------------------------------------

ADDRS = ("a", "b", "c", "d", "e")
configs = st.builds(
    EscrowConfig,
    escrow_id=st.just("p"),
    slots=st.lists(st.sampled_from(ADDRS), min_size=1, max_size=16).map(tuple),
    vote_threshold_factor=st.one_of(st.none(), st.sampled_from([0, 25, 50, 67, 100]), st.integers(0, 150)),
    settled=st.booleans(),
)


@st.composite
def plausible_tx(draw, n_slots: int):
    """A tx biased towards being accepted, so deep states are reached often."""
    kind = draw(st.sampled_from(list(KIND_ORDER)))
    iid = draw(st.integers(0, 10))
    nonce = iid if kind == "start" else draw(st.integers(0, 14))
    slot = draw(st.one_of(st.just(iid % n_slots), st.integers(-1, n_slots), st.none()))
    votes = draw(
        st.lists(st.tuples(st.integers(-1, n_slots), st.booleans()), max_size=n_slots)
        | st.lists(st.tuples(st.integers(0, n_slots - 1), st.just(True)), max_size=n_slots, unique_by=lambda v: v[0])
    )
    return Tx(
        diff_nonce=nonce,
        kind=kind,
        inference_id=iid,
        slot=slot,
        valid=draw(st.one_of(st.none(), st.booleans())),
        reason=draw(st.sampled_from(["refused", "execution", None, "bogus"])),
        votes=tuple(votes),
        input_tokens=draw(st.one_of(st.none(), st.integers(0, 5))),
        output_tokens=draw(st.one_of(st.none(), st.integers(0, 5))),
    )


@st.composite
def escrow_and_log(draw):
    conf = draw(configs)
    txs = draw(st.lists(plausible_tx(len(conf.slots)), max_size=40))
    return conf, txs


wild_txs = st.lists(
    st.builds(
        Tx,
        diff_nonce=st.integers(-3, 2**64),
        kind=st.sampled_from(list(KIND_ORDER) + ["bogus", ""]),
        inference_id=st.integers(-3, 2**64),
        slot=st.one_of(st.none(), st.integers(-(2**40), 2**40)),
        valid=st.one_of(st.none(), st.booleans()),
        reason=st.one_of(st.none(), st.text(max_size=3), st.sampled_from(["refused", "execution"])),
        votes=st.lists(st.tuples(st.integers(-5, 40), st.booleans()), max_size=6).map(tuple),
        input_tokens=st.one_of(st.none(), st.integers()),
        output_tokens=st.one_of(st.none(), st.integers()),
    ),
    max_size=30,
)

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ALLOWED_EDGES = {
    (None, "Pending", "start"),
    ("Pending", "Started", "confirm_start"),
    ("Started", "Finished", "finish"),
    ("Finished", "Challenged", "validation"),
    ("Challenged", "Validated", "validation_vote"),
    ("Challenged", "Invalidated", "validation_vote"),
    ("Pending", "TimedOut", "timeout"),
    ("Started", "TimedOut", "timeout"),
    ("Finished", "TimedOut", "error_miss"),
    ("Pending", "Finished", "settlement_drain"),
    ("Started", "Finished", "settlement_drain"),
}


@PROPS
@given(configs, wild_txs)
def test_any_tx_list_never_raises(conf, txs):
    res = replay(conf, txs)
    assert len(res.rejections) + len(res.ignored) <= len(txs)


@PROPS
@given(escrow_and_log(), st.randoms(use_true_random=False))
def test_deterministic_and_input_order_insensitive(case, rnd):
    conf, txs = case
    first = replay(conf, txs)
    assert replay(conf, iter(txs)) == first
    shuffled = list(txs)
    rnd.shuffle(shuffled)
    assert replay(conf, shuffled) == first


@PROPS
@given(escrow_and_log())
def test_state_invariants(case):
    conf, txs = case
    res = replay(conf, txs)
    n = len(conf.slots)
    weight = {a: conf.slots.count(a) for a in conf.slots}
    for rec in res.inferences.values():
        assert rec.status in STATUSES
        assert rec.executor_slot == rec.inference_id % n
        assert rec.executor_address == conf.slots[rec.executor_slot]
        assert 0 <= rec.votes_valid <= n and 0 <= rec.votes_invalid <= n
        assert rec.votes_valid + rec.votes_invalid <= sum(weight[a] for a in rec.voted_addresses)
        assert (rec.status == "TimedOut") == (rec.penalty == "missed")
        assert (rec.status == "Invalidated") == (rec.penalty == "invalid")
        assert (rec.status == "TimedOut") == (rec.timeout_reason is not None)
        if rec.status in ("Validated", "Invalidated"):
            assert rec.resolved_nonce is not None and rec.challenged_nonce is not None
        if conf.settled:
            assert rec.status not in ("Pending", "Started")
    for s in range(n):
        assert res.slot_missed[s] == sum(
            r.status == "TimedOut" and r.executor_slot == s for r in res.inferences.values()
        )
        assert res.slot_invalid[s] == sum(
            r.status == "Invalidated" and r.executor_slot == s for r in res.inferences.values()
        )
    assert all(r.reason == "ignored_resolved" for r in res.ignored)
    assert all(r.reason != "ignored_resolved" for r in res.rejections)


@PROPS
@given(escrow_and_log())
def test_transitions_form_each_records_history(case):
    conf, txs = case
    res = replay(conf, txs)
    by_id: dict[int, list[Transition]] = {}
    for t in res.transitions:
        assert (t.from_status, t.to_status, t.cause) in ALLOWED_EDGES
        by_id.setdefault(t.inference_id, []).append(t)
    assert by_id.keys() == res.inferences.keys()
    for iid, chain in by_id.items():
        assert chain[0].from_status is None
        for prev, nxt in zip(chain, chain[1:]):
            assert nxt.from_status == prev.to_status
        rec = res.inferences[iid]
        assert chain[-1].to_status == rec.status
        assert chain[-1].diff_nonce == rec.status_nonce


@PROPS
@given(escrow_and_log())
def test_rejected_and_ignored_txs_change_nothing(case):
    conf, txs = case
    conf = EscrowConfig(conf.escrow_id, conf.slots, conf.vote_threshold_factor, settled=False)
    ordered = sorted(txs, key=sort_key)
    before = replay(conf, [])
    for k, tx in enumerate(ordered):
        after = replay(conf, ordered[: k + 1])
        noted = len(after.rejections) + len(after.ignored) - len(before.rejections) - len(before.ignored)
        assert noted in (0, 1)
        if noted:
            assert after.inferences == before.inferences
            assert after.transitions == before.transitions
            assert after.slot_missed == before.slot_missed
            assert after.slot_invalid == before.slot_invalid
        before = after


def test_result_types_are_the_interface_ones():
    res = replay(cfg(), [start(0), Tx(0, "start", 0)])
    assert isinstance(res.inferences[0], InferenceState)
    assert isinstance(res.rejections[0], Rejection)
    with pytest.raises(AttributeError):
        res.rejections[0].reason = "x"  # frozen


def test_txs_of_one_diff_apply_in_their_tx_index_order():
    # applyCore runs a diff's txs as listed. Five single-slot hosts, threshold 5 * 50 // 100 = 2; inference 5 run
    # by slot 0. One diff lists an invalid validation (slot 2) before a valid one (slot 1): the first challenges,
    # so the second lands on Challenged and adds no weight; two valid votes then make 2, not > 2.
    slots = ("A", "B", "C", "D", "E")
    log = [start(5), confirm(6, 5), finish(7, 5, 0),
           validation(8, 5, 2, False)._replace(tx_index=0), validation(8, 5, 1, True)._replace(tx_index=1),
           vote(9, 5, 3, True), vote(10, 5, 4, True)]
    rec = replay(cfg(slots), log).inferences[5]
    assert (rec.status, rec.votes_valid, rec.votes_invalid) == ("Challenged", 2, 1)
    # listed the other way round, the valid one counts while Finished and the votes validate
    log[3:5] = [validation(8, 5, 1, True)._replace(tx_index=0), validation(8, 5, 2, False)._replace(tx_index=1)]
    rec = replay(cfg(slots), log).inferences[5]
    assert (rec.status, rec.votes_valid, rec.votes_invalid) == ("Validated", 3, 1)

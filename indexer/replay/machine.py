"""Pure replay of one devshard escrow's tx log (gonka-devshard.md §1.2, §1.3, §3.1-§3.5).

Stdlib only and free of I/O so the DB layer, the rules stage and the tests share one
definition of the protocol state machine. Protocol state is always *derived* here, never read
from a record (interface.md §2).

Judgement calls where the reference is silent (strict, protocol-faithful):
  * Check order per tx: unknown kind -> unknown inference -> missing/out-of-range slot ->
    status -> identity rules (executor, duplicate address) -> vote weight. A malformed tx is
    rejected even when the record is resolved; only a well-formed vote on a resolved record is
    'ignored_resolved'.
  * A MsgValidation on Challenged/Validated/Invalidated is accepted: it adds no weight but sets
    the validator's validated_by bit (so that address can no longer vote). It is not "ignored".
  * Only validator_slot == executor_slot is refused for MsgValidation (the reference compares
    slots, not addresses); MsgValidationVote has no executor exclusion in the reference.
  * Timeout / error-miss votes: one vote per address whether it accepts or not.
  * An empty slot group cannot host inferences: every start is rejected ('empty_group').
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

STATUSES = ("Pending", "Started", "Finished", "Challenged", "Validated", "Invalidated", "TimedOut")

KIND_ORDER = {
    "start": 0,
    "confirm_start": 1,
    "finish": 2,
    "validation": 3,
    "validation_vote": 4,
    "timeout": 5,
    "error_miss": 6,
}

# MsgValidation is accepted on these (§3.2); it only adds weight while Finished.
_VALIDATION_OK = frozenset({"Finished", "Challenged", "Validated", "Invalidated"})
_RESOLVED = frozenset({"Validated", "Invalidated"})
# Timeout reason -> the status it requires (§3.4).
_TIMEOUT_FROM = {"refused": "Pending", "execution": "Started"}
_SLOT_KINDS = frozenset({"finish", "validation", "validation_vote"})


def vote_threshold(group_size: int, factor: int | None) -> int:
    """§3.1: factor 0 means 'half'; integer floor either way."""
    if not factor:
        return group_size // 2
    return (group_size * factor) // 100


@dataclass(frozen=True, slots=True)
class EscrowConfig:
    escrow_id: str
    slots: tuple[str, ...]  # index = slot id, value = participant address
    vote_threshold_factor: int | None
    settled: bool = False


class Tx(NamedTuple):  # a NamedTuple: immutable like a frozen dataclass, several times cheaper to build
    diff_nonce: int
    kind: str
    inference_id: int
    slot: int | None = None  # executor / validator / voter slot depending on kind
    valid: bool | None = None  # validation.valid / validation_vote.vote_valid
    reason: str | None = None  # timeout: 'refused' | 'execution'
    votes: tuple[tuple[int, bool], ...] = ()  # timeout / error_miss: (voter_slot, accept)
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(slots=True)
class InferenceState:
    inference_id: int
    executor_slot: int
    executor_address: str | None
    status: str = "Pending"
    votes_valid: int = 0
    votes_invalid: int = 0
    penalty: str | None = None
    status_nonce: int | None = None
    challenged_nonce: int | None = None
    challenger_slot: int | None = None
    resolved_nonce: int | None = None
    timeout_reason: str | None = None
    # validated_by, kept per address: the protocol sets the bits of all of an address's slots.
    voted_addresses: set[str] = field(default_factory=set)
    input_tokens: int | None = None  # from the accepted Finish
    output_tokens: int | None = None
    # diff_nonce at which each status was entered (each is entered at most once); None for the settlement drain
    entered: dict[str, int | None] = field(default_factory=dict)
    drained: bool = False


class Rejection(NamedTuple):  # NamedTuple: one per status change, so construction cost matters
    diff_nonce: int
    kind: str
    inference_id: int
    slot: int | None
    reason: str


class Transition(NamedTuple):  # NamedTuple: one per status change, so construction cost matters
    inference_id: int
    diff_nonce: int | None
    from_status: str | None
    to_status: str
    cause: str


@dataclass(slots=True)
class ReplayResult:
    inferences: dict[int, InferenceState]
    rejections: list[Rejection]
    transitions: list[Transition]
    ignored: list[Rejection]
    slot_missed: dict[int, int]
    slot_invalid: dict[int, int]
    vote_threshold: int
    votes: list["VoteEvent"] = field(default_factory=list)


class VoteEvent(NamedTuple):
    """An accepted MsgValidation / MsgValidationVote and what it did to the tally, for analyses that re-run a
    tally without some voters. effect: 'weight' (added to a side), 'no_weight' (a validation after the record
    left Finished: only sets the bit) or 'ignored' (a vote on a resolved record, first from its address)."""
    inference_id: int
    diff_nonce: int
    kind: str
    slot: int
    address: str
    weight: int
    valid: bool
    effect: str


def _opt(value: object) -> tuple:
    # None sorts first and never gets compared with a real value.
    return (0,) if value is None else (1, value)


def sort_key(tx: Tx) -> tuple:
    """Replay order: (diff_nonce, kind order, inference_id, slot), then the remaining fields so
    that even look-alike txs in one diff get a total, input-order-independent order."""
    return (
        tx.diff_nonce,
        KIND_ORDER.get(tx.kind, len(KIND_ORDER)),
        tx.kind,
        tx.inference_id,
        _opt(tx.slot),
        _opt(tx.valid),
        _opt(tx.reason),
        tuple((_opt(s), bool(a)) for s, a in tx.votes),
        _opt(tx.input_tokens),
        _opt(tx.output_tokens),
    )


class _Machine:
    """Mutable replay state of one escrow; each handler returns a rejection code or None."""

    def __init__(self, config: EscrowConfig, keep_transitions: bool = True) -> None:
        self.keep_transitions = keep_transitions
        self.slots = tuple(config.slots)
        self.weight: dict[str, int] = {}
        for address in self.slots:
            self.weight[address] = self.weight.get(address, 0) + 1
        self.threshold = vote_threshold(len(self.slots), config.vote_threshold_factor)
        self._handlers = {kind: getattr(self, "_" + kind) for kind in KIND_ORDER if kind != "start"}
        self.result = ReplayResult(
            inferences={},
            rejections=[],
            transitions=[],
            ignored=[],
            slot_missed={s: 0 for s in range(len(self.slots))},
            slot_invalid={s: 0 for s in range(len(self.slots))},
            vote_threshold=self.threshold,
        )

    # -- helpers -----------------------------------------------------------------------------

    def _in_range(self, slot: int | None) -> bool:
        return slot is not None and 0 <= slot < len(self.slots)

    def _move(self, rec: InferenceState, to: str, nonce: int | None, cause: str) -> None:
        if self.keep_transitions:
            self.result.transitions.append(Transition(rec.inference_id, nonce, rec.status, to, cause))
        rec.entered[to] = nonce
        rec.status = to
        rec.status_nonce = nonce

    def _accept_weight(self, votes: tuple[tuple[int, bool], ...]) -> tuple[str | None, int]:
        """§3.4: every vote from a group slot, one per address; weight of accepting addresses."""
        seen: set[str] = set()
        weight = 0
        for voter_slot, accept in votes:
            if not self._in_range(voter_slot):
                return "slot_out_of_range", 0
            address = self.slots[voter_slot]
            if address in seen:
                return "duplicate_vote_address", 0
            seen.add(address)
            if accept:
                weight += self.weight[address]
        return None, weight

    def _miss(self, rec: InferenceState, tx: Tx, why: str) -> str | None:
        """Shared tail of timeout and error-miss: vote check, then TimedOut + missed."""
        problem, weight = self._accept_weight(tx.votes)
        if problem:
            return problem
        if not weight > self.threshold:  # strict: equality does not decide
            return f"insufficient_votes:{weight}<={self.threshold}"
        self._move(rec, "TimedOut", tx.diff_nonce, tx.kind)
        rec.penalty = "missed"
        rec.timeout_reason = why
        self.result.slot_missed[rec.executor_slot] += 1
        return None

    # -- dispatch ----------------------------------------------------------------------------

    def apply(self, tx: Tx) -> None:
        if tx.kind not in KIND_ORDER:
            return self._reject(tx, "unknown_kind")
        if tx.kind == "start":
            return self._reject(tx, self._start(tx))
        rec = self.result.inferences.get(tx.inference_id)
        if rec is None:
            return self._reject(tx, "unknown_inference")
        if tx.kind in _SLOT_KINDS and not self._in_range(tx.slot):
            return self._reject(tx, "missing_slot" if tx.slot is None else "slot_out_of_range")
        return self._reject(tx, self._handlers[tx.kind](rec, tx))

    def _reject(self, tx: Tx, reason: str | None) -> None:
        if reason is None:
            return
        entry = Rejection(tx.diff_nonce, tx.kind, tx.inference_id, tx.slot, reason)
        if reason == "ignored_resolved":  # accepted by the protocol, no effect
            self.result.ignored.append(entry)
        else:
            self.result.rejections.append(entry)

    # -- per-kind rules ------------------------------------------------------------------------

    def _start(self, tx: Tx) -> str | None:
        if tx.inference_id != tx.diff_nonce:  # inference_id is the nonce of its start diff
            return "inference_id_mismatch"
        if tx.inference_id in self.result.inferences:
            return "duplicate_start"
        if not self.slots:
            return "empty_group"
        executor = tx.inference_id % len(self.slots)
        rec = InferenceState(tx.inference_id, executor, self.slots[executor], status_nonce=tx.diff_nonce)
        self.result.inferences[tx.inference_id] = rec
        rec.entered["Pending"] = tx.diff_nonce
        if self.keep_transitions:
            self.result.transitions.append(Transition(rec.inference_id, tx.diff_nonce, None, "Pending", "start"))
        return None

    def _confirm_start(self, rec: InferenceState, tx: Tx) -> str | None:
        if rec.status != "Pending":
            return f"wrong_status:{rec.status}"
        self._move(rec, "Started", tx.diff_nonce, tx.kind)
        return None

    def _finish(self, rec: InferenceState, tx: Tx) -> str | None:
        # Status first: a Pending record cannot take a Finish even with the right slot.
        if rec.status != "Started":
            return f"wrong_status:{rec.status}"
        if tx.slot != rec.executor_slot:
            return "executor_slot_mismatch"
        rec.input_tokens, rec.output_tokens = tx.input_tokens, tx.output_tokens
        self._move(rec, "Finished", tx.diff_nonce, tx.kind)
        return None

    def _validation(self, rec: InferenceState, tx: Tx) -> str | None:
        if rec.status not in _VALIDATION_OK:
            return f"wrong_status:{rec.status}"
        if tx.slot == rec.executor_slot:
            return "validator_is_executor"
        address = self.slots[tx.slot]
        if address in rec.voted_addresses:
            return "duplicate_voter"
        rec.voted_addresses.add(address)
        finished = rec.status == "Finished"
        self._record_vote(rec, tx, address, "weight" if finished else "no_weight")
        if not finished:  # later validations only set the bit (§3.2)
            return None
        if tx.valid:
            rec.votes_valid += self.weight[address]
            return None
        # valid False opens a challenge; None counts as False because proto3/Go JSON omit a
        # false bool, so a decoded MsgValidation{valid:false} often has no 'valid' at all.
        rec.votes_invalid += self.weight[address]
        rec.challenged_nonce, rec.challenger_slot = tx.diff_nonce, tx.slot
        self._move(rec, "Challenged", tx.diff_nonce, tx.kind)
        return None  # no tally is resolved by a MsgValidation itself

    def _record_vote(self, rec: InferenceState, tx: Tx, address: str, effect: str) -> None:
        self.result.votes.append(VoteEvent(rec.inference_id, tx.diff_nonce, tx.kind, tx.slot, address,
                                           self.weight[address], bool(tx.valid), effect))

    def _validation_vote(self, rec: InferenceState, tx: Tx) -> str | None:
        if rec.status in _RESOLVED:
            if self.slots[tx.slot] not in rec.voted_addresses:  # cast, but the tally was already decided
                self._record_vote(rec, tx, self.slots[tx.slot], "ignored")
            return "ignored_resolved"  # protocol ignores these for safe batching (§3.3)
        if rec.status != "Challenged":
            return f"wrong_status:{rec.status}"
        address = self.slots[tx.slot]
        if address in rec.voted_addresses:
            return "duplicate_voter"
        rec.voted_addresses.add(address)
        self._record_vote(rec, tx, address, "weight")
        if tx.valid:
            rec.votes_valid += self.weight[address]
        else:
            rec.votes_invalid += self.weight[address]
        self._resolve(rec, tx)
        return None

    def _resolve(self, rec: InferenceState, tx: Tx) -> None:
        # Invalid is checked FIRST after every vote (§3.3); strict '>'.
        if rec.votes_invalid > self.threshold:
            self._move(rec, "Invalidated", tx.diff_nonce, tx.kind)
            rec.penalty = "invalid"
            self.result.slot_invalid[rec.executor_slot] += 1
        elif rec.votes_valid > self.threshold:
            self._move(rec, "Validated", tx.diff_nonce, tx.kind)
        else:
            return
        rec.resolved_nonce = tx.diff_nonce

    def _timeout(self, rec: InferenceState, tx: Tx) -> str | None:
        required = _TIMEOUT_FROM.get(tx.reason or "")
        if required is None:
            return "bad_reason"
        if rec.status != required:
            return f"wrong_status:{rec.status}"
        return self._miss(rec, tx, tx.reason)

    def _error_miss(self, rec: InferenceState, tx: Tx) -> str | None:
        if rec.status != "Finished":
            return f"wrong_status:{rec.status}"
        return self._miss(rec, tx, "error_miss")

    def drain(self) -> None:
        """Settlement turns still-live records into Finished with no miss (§1.2)."""
        for inference_id in sorted(self.result.inferences):
            rec = self.result.inferences[inference_id]
            if rec.status in ("Pending", "Started"):
                self._move(rec, "Finished", None, "settlement_drain")
                rec.drained = True


def replay(config: EscrowConfig, txs: Iterable[Tx], *, presorted: bool = False,
           transitions: bool = True) -> ReplayResult:
    """Replay an escrow's txs in protocol order; a rejected tx changes nothing.

    presorted=True skips the sort when the caller already delivers `sort_key` order (the database does: its
    keys make (diff_nonce, kind order, inference_id, slot) unique). transitions=False skips the history list
    (each record still keeps the nonce at which it entered every status, in `entered`)."""
    machine = _Machine(config, keep_transitions=transitions)
    for tx in (txs if presorted else sorted(txs, key=sort_key)):
        machine.apply(tx)
    if config.settled:
        machine.drain()
    return machine.result

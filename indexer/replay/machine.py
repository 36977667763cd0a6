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
  * A MsgValidation from an address that already validated or voted is a no-op, whatever the status
    ('ignored_duplicate': applyValidation dedups before its status gate); a duplicate
    MsgValidationVote is refused ('duplicate_voter', ErrDuplicateVote).
  * Only validator_slot == executor_slot is refused for MsgValidation (the reference compares
    slots, not addresses); MsgValidationVote has no executor exclusion in the reference.
  * Timeout / error-miss votes: one vote per address whether it accepts or not.
  * An empty slot group cannot host inferences: every start is rejected ('empty_group').
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from indexer.verify.inputs import vote_threshold  # one definition: the replay and the verifier count votes alike

STATUSES = ("Pending", "Started", "Finished", "Challenged", "Validated", "Invalidated", "TimedOut")

TX_KINDS = ("start", "confirm_start", "finish", "validation", "validation_vote", "timeout", "error_miss")
KIND_ORDER = {kind: code for code, kind in enumerate(TX_KINDS)}  # protocol order inside a diff; a kind's row code
_UNKNOWN = len(TX_KINDS)

# MsgValidation is accepted on these (§3.2); it only adds weight while Finished.
_VALIDATION_OK = frozenset({"Finished", "Challenged", "Validated", "Invalidated"})
_RESOLVED = frozenset({"Validated", "Invalidated"})
# Timeout reason -> the status it requires (§3.4).
_TIMEOUT_FROM = {"refused": "Pending", "execution": "Started"}


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
    tx_index: int | None = None  # position inside its diff: the order the hosts applied it in


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
    """Replay order: (diff_nonce, tx_index), the order the hosts applied the txs in (applyCore runs a diff's txs
    as listed, and two validations of one inference in one diff end differently in the other order); for txs
    without a tx_index, (kind order, inference_id, slot), then the remaining fields so that even look-alike txs in
    one diff get a total, input-order-independent order."""
    return (
        tx.diff_nonce,
        _opt(tx.tx_index),
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
    """Mutable replay state of one escrow, fed rows (see `replay_rows`) in protocol order.

    Start, confirm and finish are nearly every tx, so `run` handles them inline with locals; the rarer kinds go to
    a method that returns a rejection code or None."""

    def __init__(self, config: EscrowConfig, keep_transitions: bool = True, kinds: tuple[str, ...] = TX_KINDS) -> None:
        self.keep_transitions = keep_transitions
        self.kinds = kinds  # code -> name; codes past the protocol's are unknown kinds (only ever rejected)
        self.slots = tuple(config.slots)
        self.weight: dict[str, int] = {}
        for address in self.slots:
            self.weight[address] = self.weight.get(address, 0) + 1
        self.threshold = vote_threshold(len(self.slots), config.vote_threshold_factor)
        self.inferences: dict[int, InferenceState] = {}
        self.rejections: list[Rejection] = []
        self.ignored: list[Rejection] = []
        self.transitions: list[Transition] = []
        self.votes: list[VoteEvent] = []
        self.missed = [0] * len(self.slots)
        self.invalid = [0] * len(self.slots)

    def result(self) -> ReplayResult:
        return ReplayResult(self.inferences, self.rejections, self.transitions, self.ignored,
                            dict(enumerate(self.missed)), dict(enumerate(self.invalid)), self.threshold, self.votes)

    def run(self, rows: Iterable[tuple]) -> None:
        slots, inferences, kinds = self.slots, self.inferences, self.kinds
        n = len(slots)
        transitions = self.transitions if self.keep_transitions else None
        rare = (None, None, None, self._validation, self._validation_vote, self._timeout, self._error_miss)
        for row in rows:  # codes are TX_KINDS positions: 0 start, 1 confirm_start, 2 finish, 3-6 the rarer kinds
            nonce, code, inference_id, slot = row[0], row[1], row[2], row[3]
            if code == 0:  # start
                if inference_id != nonce:  # inference_id is the nonce of its start diff
                    why = "inference_id_mismatch"
                elif inference_id in inferences:
                    why = "duplicate_start"
                elif not n:
                    why = "empty_group"
                else:
                    executor = inference_id % n
                    inferences[inference_id] = InferenceState(inference_id, executor, slots[executor],
                                                              status_nonce=nonce, entered={"Pending": nonce})
                    if transitions is not None:
                        transitions.append(Transition(inference_id, nonce, None, "Pending", "start"))
                    continue
            elif code >= _UNKNOWN:
                why = "unknown_kind"
            elif (rec := inferences.get(inference_id)) is None:
                why = "unknown_inference"
            elif code == 1:  # confirm_start
                if rec.status != "Pending":
                    why = "wrong_status:" + rec.status
                else:
                    if transitions is not None:
                        transitions.append(Transition(inference_id, nonce, "Pending", "Started", "confirm_start"))
                    rec.entered["Started"] = rec.status_nonce = nonce
                    rec.status = "Started"
                    continue
            elif code <= 4 and (slot is None or not 0 <= slot < n):  # finish, validation, vote
                why = "missing_slot" if slot is None else "slot_out_of_range"
            elif code == 2:  # finish; status first: a Pending record cannot take a Finish even with the right slot
                if rec.status != "Started":
                    why = "wrong_status:" + rec.status
                elif slot != rec.executor_slot:
                    why = "executor_slot_mismatch"
                else:
                    rec.input_tokens, rec.output_tokens = row[7], row[8]
                    if transitions is not None:
                        transitions.append(Transition(inference_id, nonce, "Started", "Finished", "finish"))
                    rec.entered["Finished"] = rec.status_nonce = nonce
                    rec.status = "Finished"
                    continue
            elif (why := rare[code](rec, row)) is None:
                continue
            entry = Rejection(nonce, kinds[code], inference_id, slot, why)
            if why.startswith("ignored"):  # accepted by the protocol, no effect
                self.ignored.append(entry)
            else:
                self.rejections.append(entry)

    # -- helpers -----------------------------------------------------------------------------

    def _move(self, rec: InferenceState, to: str, nonce: int | None, cause: str) -> None:
        if self.keep_transitions:
            self.transitions.append(Transition(rec.inference_id, nonce, rec.status, to, cause))
        rec.entered[to] = nonce
        rec.status = to
        rec.status_nonce = nonce

    def _accept_weight(self, votes: tuple[tuple[int, bool], ...]) -> tuple[str | None, int]:
        """§3.4: every vote from a group slot, one per address; weight of accepting addresses."""
        seen: set[str] = set()
        weight = 0
        for voter_slot, accept in votes:
            if voter_slot is None or not 0 <= voter_slot < len(self.slots):
                return "slot_out_of_range", 0
            address = self.slots[voter_slot]
            if address in seen:
                return "duplicate_vote_address", 0
            seen.add(address)
            if accept:
                weight += self.weight[address]
        return None, weight

    def _miss(self, rec: InferenceState, row: tuple, why: str) -> str | None:
        """Shared tail of timeout and error-miss: vote check, then TimedOut + missed."""
        problem, weight = self._accept_weight(row[6])
        if problem:
            return problem
        if not weight > self.threshold:  # strict: equality does not decide
            return f"insufficient_votes:{weight}<={self.threshold}"
        self._move(rec, "TimedOut", row[0], self.kinds[row[1]])
        rec.penalty = "missed"
        rec.timeout_reason = why
        self.missed[rec.executor_slot] += 1
        return None

    def _record_vote(self, rec: InferenceState, row: tuple, address: str, effect: str) -> None:
        self.votes.append(VoteEvent(rec.inference_id, row[0], self.kinds[row[1]], row[3], address,
                                    self.weight[address], bool(row[4]), effect))

    # -- the rarer kinds (slot already checked to be in range) -----------------------------------

    def _validation(self, rec: InferenceState, row: tuple) -> str | None:
        # applyValidation's order (devshard/state/machine.go): self-validation, then the address dedup, which is
        # "always a no-op" (an accepted tx without effect), then the status gate
        nonce, slot, valid = row[0], row[3], row[4]
        if slot == rec.executor_slot:
            return "validator_is_executor"
        address = self.slots[slot]
        if address in rec.voted_addresses:
            return "ignored_duplicate"
        if rec.status not in _VALIDATION_OK:
            return f"wrong_status:{rec.status}"
        rec.voted_addresses.add(address)
        finished = rec.status == "Finished"
        self._record_vote(rec, row, address, "weight" if finished else "no_weight")
        if not finished:  # later validations only set the bit (§3.2)
            return None
        if valid:
            rec.votes_valid += self.weight[address]
            return None
        # valid False opens a challenge; None counts as False because proto3/Go JSON omit a
        # false bool, so a decoded MsgValidation{valid:false} often has no 'valid' at all.
        rec.votes_invalid += self.weight[address]
        rec.challenged_nonce, rec.challenger_slot = nonce, slot
        self._move(rec, "Challenged", nonce, "validation")
        return None  # no tally is resolved by a MsgValidation itself

    def _validation_vote(self, rec: InferenceState, row: tuple) -> str | None:
        address = self.slots[row[3]]
        if rec.status in _RESOLVED:
            if address not in rec.voted_addresses:  # cast, but the tally was already decided
                self._record_vote(rec, row, address, "ignored")
            return "ignored_resolved"  # protocol ignores these for safe batching (§3.3)
        if rec.status != "Challenged":
            return f"wrong_status:{rec.status}"
        if address in rec.voted_addresses:
            return "duplicate_voter"
        rec.voted_addresses.add(address)
        self._record_vote(rec, row, address, "weight")
        if row[4]:
            rec.votes_valid += self.weight[address]
        else:
            rec.votes_invalid += self.weight[address]
        self._resolve(rec, row[0])
        return None

    def _resolve(self, rec: InferenceState, nonce: int) -> None:
        # Invalid is checked FIRST after every vote (§3.3); strict '>'.
        if rec.votes_invalid > self.threshold:
            self._move(rec, "Invalidated", nonce, "validation_vote")
            rec.penalty = "invalid"
            self.invalid[rec.executor_slot] += 1
        elif rec.votes_valid > self.threshold:
            self._move(rec, "Validated", nonce, "validation_vote")
        else:
            return
        rec.resolved_nonce = nonce

    def _timeout(self, rec: InferenceState, row: tuple) -> str | None:
        reason = row[5]
        required = _TIMEOUT_FROM.get(reason or "")
        if required is None:
            return "bad_reason"
        if rec.status != required:
            return f"wrong_status:{rec.status}"
        return self._miss(rec, row, reason)

    def _error_miss(self, rec: InferenceState, row: tuple) -> str | None:
        if rec.status != "Finished":
            return f"wrong_status:{rec.status}"
        return self._miss(rec, row, "error_miss")

    def drain(self) -> None:
        """Settlement turns still-live records into Finished with no miss (§1.2)."""
        for inference_id in sorted(self.inferences):
            rec = self.inferences[inference_id]
            if rec.status in ("Pending", "Started"):
                self._move(rec, "Finished", None, "settlement_drain")
                rec.drained = True


def replay(config: EscrowConfig, txs: Iterable[Tx], *, presorted: bool = False,
           transitions: bool = True) -> ReplayResult:
    """Replay an escrow's txs in protocol order; a rejected tx changes nothing.

    presorted=True skips the sort when the caller already delivers `sort_key` order. transitions=False skips the
    history list (each record still keeps the nonce at which it entered every status, in `entered`)."""
    codes, kinds, rows = dict(KIND_ORDER), list(TX_KINDS), []
    for tx in (txs if presorted else sorted(txs, key=sort_key)):
        code = codes.get(tx.kind)
        if code is None:  # an unknown kind is only rejected; its code just names it
            code = codes[tx.kind] = len(kinds)
            kinds.append(tx.kind)
        rows.append((tx.diff_nonce, code, *tx[2:-1]))
    return _replay(config, rows, transitions, tuple(kinds))


def replay_rows(config: EscrowConfig, rows: Iterable[tuple], *, transitions: bool = True) -> ReplayResult:
    """`replay` for callers that hold rows rather than Txs (the database path): each row is a Tx with the kind's
    code (KIND_ORDER) in place of its name, fields after the last one its kind reads may be left out (slot always
    present), and the rows come in protocol order (`sort_key`: the database path sorts by diff_nonce and tx_index
    first, indexer.replay.reads.escrow_logs)."""
    return _replay(config, rows, transitions, TX_KINDS)


def _replay(config: EscrowConfig, rows: Iterable[tuple], transitions: bool, kinds: tuple[str, ...]) -> ReplayResult:
    machine = _Machine(config, transitions, kinds)
    machine.run(rows)
    if config.settled:
        machine.drain()
    return machine.result()

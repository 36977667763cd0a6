"""Reference devshard state machine (§1.2, §3) used as the devnet's ground truth.

The generator applies every tx it emits through this machine, so the diff logs it serves are legal
by construction (an illegal tx raises :class:`ProtocolViolation`, i.e. a generator bug) and the
final statuses / host stats are what a correct replay must reproduce.

Assumptions where §3 is silent (documented because the indexer's replay must agree):
* a timeout or error-miss whose accept weight is not above the threshold is a no-op, not an error;
* ``completed_validations[validator_slot] += 1`` per accepted, non-duplicate ``MsgValidation``;
  ``required_validations`` is bumped by the generator when it samples a validator (not on the wire).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

PENDING, STARTED, FINISHED, CHALLENGED, VALIDATED, INVALIDATED, TIMED_OUT = range(7)
STATUS_NAMES = ("Pending", "Started", "Finished", "Challenged", "Validated", "Invalidated", "TimedOut")


class ProtocolViolation(Exception):
    pass


@dataclass
class Record:
    inference_id: int
    executor_slot: int
    model: str
    prompt_hash: bytes
    input_length: int
    max_tokens: int
    reserved_cost: int
    status: int = PENDING
    input_tokens: int = 0
    output_tokens: int = 0
    actual_cost: int = 0
    response_hash: bytes = b""
    votes_valid: int = 0
    votes_invalid: int = 0
    validated_by: set[str] = field(default_factory=set)


@dataclass
class SlotStats:
    missed: int = 0
    invalid: int = 0
    cost: int = 0
    required_validations: int = 0
    completed_validations: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def vote_threshold(group_size: int, factor: int) -> int:
    """§3.1: floor(group/2) when the factor is 0, else floor(group·factor/100). Written here, not imported from
    indexer.replay.machine: this machine is the devnet's independent ground truth, so a slip in the replay's
    formula must show up as a mismatch rather than be shared."""
    return group_size // 2 if factor == 0 else group_size * factor // 100


class EscrowState:
    def __init__(self, slots: list[str], vote_threshold_factor: int, token_price: int) -> None:
        self.slots = list(slots)
        self.threshold = vote_threshold(len(slots), vote_threshold_factor)
        self.token_price = token_price
        self.records: dict[int, Record] = {}
        self.stats = [SlotStats() for _ in slots]

    # -- helpers ------------------------------------------------------------------------------
    def weight(self, address: str) -> int:
        return self.slots.count(address)

    def executor_slot(self, inference_id: int) -> int:
        return inference_id % len(self.slots)

    def record(self, inference_id: int) -> Record:
        rec = self.records.get(inference_id)
        if rec is None:
            raise ProtocolViolation(f"unknown inference {inference_id}")
        return rec

    def status_name(self, inference_id: int) -> str:
        return STATUS_NAMES[self.record(inference_id).status]

    def _accept_weight(self, votes: list[Mapping[str, Any]]) -> int:
        seen: set[str] = set()
        weight = 0
        for v in votes:
            addr = self.slots[v["voter_slot"]]
            if addr in seen:
                raise ProtocolViolation(f"two votes from {addr}")
            seen.add(addr)
            weight += self.weight(addr) if v["accept"] else 0
        return weight

    # -- transitions --------------------------------------------------------------------------
    def apply(self, name: str, msg: Mapping[str, Any], nonce: int) -> None:
        handler = getattr(self, f"_apply_{name}", None)
        if handler is not None:
            handler(msg, nonce)

    def _apply_start_inference(self, m: Mapping[str, Any], nonce: int) -> None:
        if m["inference_id"] != nonce or nonce in self.records:
            raise ProtocolViolation(f"start {m['inference_id']} in diff {nonce}")
        reserved = (m["input_length"] + m["max_tokens"]) * self.token_price
        self.records[nonce] = Record(nonce, self.executor_slot(nonce), m["model"], m["prompt_hash"],
                                     m["input_length"], m["max_tokens"], reserved)

    def _apply_confirm_start(self, m: Mapping[str, Any], nonce: int) -> None:
        rec = self._expect(m["inference_id"], PENDING, "confirm")
        rec.status = STARTED

    def _apply_finish_inference(self, m: Mapping[str, Any], nonce: int) -> None:
        rec = self._expect(m["inference_id"], STARTED, "finish")
        if m["executor_slot"] != rec.executor_slot:
            raise ProtocolViolation("finish from a slot that is not the executor")
        rec.status = FINISHED
        rec.input_tokens, rec.output_tokens = m["input_tokens"], m["output_tokens"]
        rec.response_hash = m["response_hash"]
        rec.actual_cost = min((rec.input_tokens + rec.output_tokens) * self.token_price, rec.reserved_cost)
        self.stats[rec.executor_slot].cost += rec.actual_cost

    def _apply_timeout_inference(self, m: Mapping[str, Any], nonce: int) -> None:
        needed = {1: PENDING, 2: STARTED}.get(m["reason"])
        if needed is None:
            raise ProtocolViolation(f"timeout reason {m['reason']}")
        rec = self._expect(m["inference_id"], needed, "timeout")
        if self._accept_weight(m["votes"]) > self.threshold:
            rec.status = TIMED_OUT
            self.stats[rec.executor_slot].missed += 1

    def _apply_error_miss(self, m: Mapping[str, Any], nonce: int) -> None:
        rec = self._expect(m["inference_id"], FINISHED, "error-miss")
        if self._accept_weight(m["votes"]) > self.threshold:
            rec.status = TIMED_OUT
            st = self.stats[rec.executor_slot]
            st.missed += 1
            st.cost = max(0, st.cost - rec.actual_cost)

    def _apply_validation(self, m: Mapping[str, Any], nonce: int) -> None:
        rec = self.record(m["inference_id"])
        if rec.status not in (FINISHED, CHALLENGED, VALIDATED, INVALIDATED):
            raise ProtocolViolation(f"validation of a {STATUS_NAMES[rec.status]} record")
        if m["validator_slot"] == rec.executor_slot:
            raise ProtocolViolation("executor validating itself")
        addr = self.slots[m["validator_slot"]]
        if addr in rec.validated_by:
            return  # idempotent per address
        rec.validated_by.add(addr)
        self.stats[m["validator_slot"]].completed_validations += 1
        if rec.status != FINISHED:
            return
        if m["valid"]:
            rec.votes_valid += self.weight(addr)
        else:
            rec.votes_invalid += self.weight(addr)
            rec.status = CHALLENGED

    def _apply_validation_vote(self, m: Mapping[str, Any], nonce: int) -> None:
        rec = self.record(m["inference_id"])
        if rec.status in (VALIDATED, INVALIDATED):
            return  # votes on a decided challenge are silently ignored (safe batching)
        if rec.status != CHALLENGED:
            raise ProtocolViolation(f"vote on a {STATUS_NAMES[rec.status]} record")
        addr = self.slots[m["voter_slot"]]
        if addr in rec.validated_by:
            raise ProtocolViolation(f"duplicate vote from {addr}")
        rec.validated_by.add(addr)
        if m["vote_valid"]:
            rec.votes_valid += self.weight(addr)
        else:
            rec.votes_invalid += self.weight(addr)
        self._tally(rec)

    def _tally(self, rec: Record) -> None:
        if rec.votes_invalid > self.threshold:  # checked first (§3.3)
            rec.status = INVALIDATED
            st = self.stats[rec.executor_slot]
            st.invalid += 1
            st.cost = max(0, st.cost - rec.actual_cost)
        elif rec.votes_valid > self.threshold:
            rec.status = VALIDATED

    def _expect(self, inference_id: int, status: int, what: str) -> Record:
        rec = self.record(inference_id)
        if rec.status != status:
            raise ProtocolViolation(f"{what} on {STATUS_NAMES[rec.status]} record {inference_id}")
        return rec

    def settle(self) -> None:
        """Settlement drain (§1.2): live Pending/Started records finish at reserved cost, no miss."""
        for rec in self.records.values():
            if rec.status in (PENDING, STARTED):
                rec.status = FINISHED
                rec.actual_cost = rec.reserved_cost
                self.stats[rec.executor_slot].cost += rec.reserved_cost

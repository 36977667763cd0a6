"""Reference devshard state machine (§1.2, §3) used as the devnet's ground truth.

The generator applies every tx it emits through this machine, so the diff logs it serves are legal
by construction (an illegal tx raises :class:`ProtocolViolation`, i.e. a generator bug) and the
final statuses / host stats are what a correct replay must reproduce.

It follows the session rules the hosts apply (gonka-ai/gonka ``devshard/state/machine.go``, ported in
:mod:`indexer.verify.apply`), and the devnet checks every escrow against that port when it signs the log
(:mod:`indexer.devnet.sealing`):
* a timeout or error-miss whose accept weight is not above the threshold is refused (``ErrInsufficientVotes``), so
  the generator never emits one;
* the session counts no validations: ``required_validations`` and ``completed_validations`` stay 0 in host stats
  (the generator keeps the validations it sampled apart, as observability);
* the settlement drain finishes Started records at their reserved cost; a Pending one is refunded and TimedOut
  without a miss up to v4.1, finished at its reserved cost from v5 (``settleLiveRecordLocked``).
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
    started_at: int = 0
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
    def __init__(self, slots: list[str], vote_threshold_factor: int, token_price: int,
                 protocol_version: str = "v5") -> None:
        self.slots = list(slots)
        self.protocol_version = protocol_version
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
                                     m["input_length"], m["max_tokens"], reserved, m["started_at"])

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
        self._enough_votes(m["votes"], "timeout")
        rec.status = TIMED_OUT
        self.stats[rec.executor_slot].missed += 1

    def _apply_error_miss(self, m: Mapping[str, Any], nonce: int) -> None:
        rec = self._expect(m["inference_id"], FINISHED, "error-miss")
        self._enough_votes(m["votes"], "error-miss")
        rec.status = TIMED_OUT
        st = self.stats[rec.executor_slot]
        st.missed += 1
        st.cost = max(0, st.cost - rec.actual_cost)

    def accepts(self, votes: list[Mapping[str, Any]]) -> bool:
        """Whether ``votes`` carry more than the threshold's accept weight (what a timeout or error-miss needs)."""
        return self._accept_weight(votes) > self.threshold

    def _enough_votes(self, votes: list[Mapping[str, Any]], what: str) -> None:
        if not self.accepts(votes):
            raise ProtocolViolation(f"{what} with {self._accept_weight(votes)} accept votes, need more than "
                                    f"{self.threshold}")

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
        """Settlement drain: live Started records finish at their reserved cost, no miss; Pending ones are refunded
        and TimedOut (no miss) up to v4.1, finished at their reserved cost from v5."""
        drain_pending = self.protocol_version not in ("v1", "v2", "v3", "v4", "v4.1")
        for rec in self.records.values():
            if rec.status == STARTED or (rec.status == PENDING and drain_pending):
                rec.status = FINISHED
                rec.actual_cost = rec.reserved_cost
                self.stats[rec.executor_slot].cost += rec.reserved_cost
            elif rec.status == PENDING:
                rec.status = TIMED_OUT

"""The minimal devshard session state machine the state root needs, ported from gonka-ai/gonka
``devshard/state/machine.go`` and ``devshard/state/seal.go`` @bb34d444 (the v4.1 release line): ``NewStateMachine``,
``applyCore``, ``applyStartInference``, ``applyConfirmStart``, ``applyFinishInference``, ``applyValidation``,
``applyValidationVote``, ``applyTimeout``, ``applyFinalizeRound``, ``settleLiveRecordLocked``, ``autoSealLocked``,
``stateClockLocked`` and ``drainLiveIntoSealedAccLocked``.

It keeps only what the root commits (records, host stats, balance, fees, phase, sealed accumulator, warm keys), not
indexer.replay.machine's view (statuses and transitions for the rules; it tracks no costs, balance or seals).
Signatures are recovered before this module (indexer.verify.diff): a tx here carries the address its signature
recovered to (``signer``); a confirm may carry its ``executor_sig`` instead, recovered here because the receipt covers
the record's start fields. This module then decides whether that address may act for the slot (the slot's own
address, or a warm key the caller has established, bound on first use as ``ResolveWarmKey`` does).
Any rule a tx breaks raises :class:`ApplyError` naming the nonce, tx index and rule; the whole diff is then refused.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

from indexer.verify import signatures as sig
from indexer.verify import state_root as sr
from indexer.verify.state_root import (CHALLENGED, FINISHED, INVALIDATED, PENDING, STARTED, TIMED_OUT, VALIDATED,
                                       HostStats, Record, State)

STATE_CLOCK_WINDOW_FACTOR = 3  # seal.go stateClockWindowFactor
_SEALABLE = {FINISHED, VALIDATED, INVALIDATED, TIMED_OUT}
_TERMINAL = {VALIDATED, INVALIDATED, TIMED_OUT}
REFUSED, EXECUTION = 1, 2  # TimeoutReason
# Versions whose session rules this module follows: the v4.1 release line (the fixture of bb34d444). v1 sessions
# have no sealed accumulator, v5 adds height sync, error-miss and block heights in records: not ported.
MACHINE_VERSIONS = ("v4.1",)
KINDS = ("start", "confirm_start", "finish", "validation", "validation_vote", "timeout", "finalize")


class ApplyError(ValueError):
    """A diff the protocol refuses (the message names nonce, tx index and the broken rule)."""


@dataclass(frozen=True)
class Config:
    token_price: int
    vote_threshold: int
    seal_grace_nonces: int
    seal_grace_seconds: int
    auto_seal_every: int = 1  # 0 means the build's compiled default upstream, which is not known here: refused
    fee_per_nonce: int = 0
    create_fee: int = 0  # CreateDevshardFee, charged once when the session starts


@dataclass
class Session:
    """One escrow's session: :class:`State` plus what applying needs and the root leaves out."""
    escrow_id: str
    config: Config
    slots: tuple[str, ...]  # index = slot id, value = the slot's (cold) address
    state: State
    latest_nonce: int = 0
    finalize_nonce: int = 0
    sealed_nonces: dict[int, int] = field(default_factory=dict)
    warm_resolver: Callable[[int, str], bool] | None = None  # (slot, recovered address) -> authorised?

    @classmethod
    def new(cls, escrow_id: str, config: Config, slots: tuple[str, ...], balance: int, version: str,
            warm_resolver: Callable[[int, str], bool] | None = None) -> "Session":
        if version not in MACHINE_VERSIONS:
            raise sr.UnsupportedVersion(f"the session rules of protocol version {version!r} are not ported (ported: "
                                        f"{', '.join(MACHINE_VERSIONS)}); its roots can still be hashed from a State")
        if not slots:
            raise ApplyError("an escrow with no slots cannot host inferences")
        if config.auto_seal_every <= 0:
            raise ApplyError("auto_seal_every must be a positive interval (0 selects a build default not known here)")
        if balance < config.create_fee:
            raise ApplyError(f"create devshard fee {config.create_fee} exceeds escrow amount {balance}")
        state = State(version=version, balance=balance - config.create_fee, fees=config.create_fee,
                      host_stats={i: HostStats() for i in range(len(slots))})
        return cls(escrow_id, config, tuple(slots), state, warm_resolver=warm_resolver)

    def root(self) -> bytes:
        return sr.state_root(self.state)

    def apply(self, nonce: int, txs: list[dict]) -> bytes:
        """Apply one diff (txs in order) and return its post_state_root; on any error the session is unchanged."""
        if nonce != self.latest_nonce + 1:
            raise ApplyError(f"nonce {nonce}: expected {self.latest_nonce + 1}")
        starts = [t for t in txs if t["kind"] == "start"]
        if len(starts) > 1 or any(t["inference_id"] != nonce for t in starts):
            raise ApplyError(f"nonce {nonce}: at most one start, with inference_id == nonce")
        saved = copy.deepcopy((self.state, self.latest_nonce, self.finalize_nonce, self.sealed_nonces))
        try:
            for index, tx in enumerate(txs):
                try:
                    if tx.get("kind") not in KINDS:
                        raise ApplyError(f"unknown tx kind {tx.get('kind')!r}")
                    getattr(self, "_" + tx["kind"])(tx)
                except (KeyError, ApplyError) as exc:
                    raise ApplyError(f"nonce {nonce} tx {index} ({tx.get('kind')}): {exc}") from None
            self._close(nonce)
            return self.root()
        except Exception:
            self.state, self.latest_nonce, self.finalize_nonce, self.sealed_nonces = saved
            raise

    # ---- per-nonce bookkeeping (applyCore steps 5-6b)
    def _close(self, nonce: int) -> None:
        s = self.state
        if s.phase == sr.ACTIVE:
            if s.balance < self.config.fee_per_nonce:
                raise ApplyError(f"nonce {nonce}: balance {s.balance} below the per-nonce fee")
            s.balance -= self.config.fee_per_nonce
            s.fees += self.config.fee_per_nonce
        self.latest_nonce = nonce
        if s.phase == sr.FINALIZING and self.finalize_nonce == 0:
            self.finalize_nonce = nonce
        if s.phase == sr.FINALIZING and nonce >= self.finalize_nonce + len(self.slots):
            s.phase = sr.SETTLEMENT
            for i in sorted(s.live):
                self._settle_live(s.live[i])
                self._seal(i, nonce)
        if s.phase == sr.ACTIVE and nonce % self.config.auto_seal_every == 0:
            self._auto_seal(nonce)

    def _seal(self, inference_id: int, nonce: int) -> None:
        s = self.state
        entry = sr.record_entry(inference_id, s.live[inference_id])
        s.sealed_acc = sr.fold_sealed(s.sealed_acc, nonce, inference_id, entry)
        self.sealed_nonces[inference_id] = nonce
        del s.live[inference_id]

    def _state_clock(self) -> int:
        """Max confirmed_at over confirmed records among the newest 3·N live ids; 0 when unknown."""
        ids = sorted(self.state.live)[-(len(self.slots) * STATE_CLOCK_WINDOW_FACTOR or STATE_CLOCK_WINDOW_FACTOR):]
        return max((self.state.live[i].confirmed_at for i in ids if self.state.live[i].confirmed_at > 0), default=0)

    def _auto_seal(self, nonce: int) -> None:
        clock = self._state_clock() if self.state.live else 0
        if clock == 0:
            return
        due = []
        for i, rec in self.state.live.items():
            if rec.status not in _SEALABLE or nonce < i + self.config.seal_grace_nonces:
                continue
            if rec.status in _TERMINAL or self.config.seal_grace_seconds - (clock - rec.confirmed_at) <= 0:
                due.append(i)
        for i in sorted(due):
            self._seal(i, nonce)

    def _settle_live(self, rec: Record) -> None:
        if rec.status == STARTED:
            rec.actual_cost, rec.status = rec.reserved_cost, FINISHED
            self.state.host_stats[rec.executor_slot].cost += rec.reserved_cost
        elif rec.status == PENDING:
            self.state.balance += rec.reserved_cost
            rec.actual_cost, rec.status = 0, TIMED_OUT

    # ---- helpers
    def _record(self, inference_id: int) -> Record:
        rec = self.state.live.get(inference_id)
        if rec is None:
            where = "sealed" if inference_id in self.sealed_nonces else "unknown"
            raise ApplyError(f"inference {inference_id} is {where}")
        return rec

    def _slot(self, slot: int) -> str:
        if not 0 <= slot < len(self.slots):
            raise ApplyError(f"slot {slot} is not in the group of {len(self.slots)}")
        return self.slots[slot]

    def _may_sign(self, slot: int, signer: str) -> None:
        """The slot's address signed, or its warm key (bound once, then fixed for the session)."""
        cold = self._slot(slot)
        if signer == cold:
            return
        bound = self.state.warm_keys.get(slot)
        if bound is not None:
            if bound != signer:
                raise ApplyError(f"slot {slot}: signed by {signer}, its warm key is {bound}")
            return
        if self.warm_resolver is None or not self.warm_resolver(slot, signer):
            raise ApplyError(f"slot {slot}: signed by {signer}, neither {cold} nor an authorised warm key")
        self.state.warm_keys[slot] = signer

    def _weight(self, slot: int) -> int:
        return self.slots.count(self.slots[slot])

    def _slots_of(self, slot: int) -> list[int]:
        return [i for i, a in enumerate(self.slots) if a == self.slots[slot]]

    def _has_validated(self, rec: Record, slot: int) -> bool:
        return any(rec.validated_by >> i & 1 for i in self._slots_of(slot))

    def _cost(self, a: int, b: int) -> int:
        cost = (a + b) * self.config.token_price
        if a + b > sr.U64 or cost > sr.U64:
            raise ApplyError(f"cost ({a} + {b}) x {self.config.token_price} overflows uint64")
        return cost

    # ---- transactions
    def _start(self, tx: dict) -> None:
        s, i = self.state, tx["inference_id"]
        if s.phase != sr.ACTIVE:
            raise ApplyError("session is finalizing")
        if i in s.live or i in self.sealed_nonces:
            raise ApplyError(f"duplicate inference id {i}")
        reserved = self._cost(tx["input_length"], tx["max_tokens"])
        if s.balance < reserved:
            raise ApplyError(f"balance {s.balance} below the reservation {reserved}")
        s.balance -= reserved
        s.live[i] = Record(status=PENDING, executor_slot=i % len(self.slots), model=tx["model"],
                           prompt_hash=tx["prompt_hash"], input_length=tx["input_length"],
                           max_tokens=tx["max_tokens"], reserved_cost=reserved, started_at=tx["started_at"])

    def _confirm_start(self, tx: dict) -> None:
        rec = self._record(tx["inference_id"])
        if rec.status != PENDING:
            raise ApplyError(f"confirm needs Pending, record is {rec.status}")
        signer = tx.get("signer")
        if signer is None:  # the receipt covers the record's start fields, so it is recovered here, against state
            receipt = sig.executor_receipt_bytes(
                inference_id=tx["inference_id"], prompt_hash=rec.prompt_hash, model=rec.model,
                input_length=rec.input_length, max_tokens=rec.max_tokens, started_at=rec.started_at,
                escrow_id=self.escrow_id, confirmed_at=tx["confirmed_at"])
            try:
                signer = sig.recover_address(receipt, tx["executor_sig"])
            except sig.SignatureError as exc:
                raise ApplyError(f"executor receipt: {exc}") from None
        self._may_sign(rec.executor_slot, signer)
        rec.status, rec.confirmed_at = STARTED, tx["confirmed_at"]

    def _finish(self, tx: dict) -> None:
        rec = self._record(tx["inference_id"])
        if rec.status != STARTED:
            raise ApplyError(f"finish needs Started, record is {rec.status}")
        if tx["executor_slot"] != rec.executor_slot:
            raise ApplyError(f"executor slot {tx['executor_slot']}, record's is {rec.executor_slot}")
        self._may_sign(rec.executor_slot, tx["signer"])
        if tx["escrow_id"] != self.escrow_id:
            raise ApplyError(f"escrow id {tx['escrow_id']!r} is not {self.escrow_id!r}")
        actual = min(self._cost(tx["input_tokens"], tx["output_tokens"]), rec.reserved_cost)
        self.state.balance += rec.reserved_cost - actual
        rec.status, rec.response_hash, rec.actual_cost = FINISHED, tx["response_hash"], actual
        rec.input_tokens, rec.output_tokens = tx["input_tokens"], tx["output_tokens"]
        self.state.host_stats[rec.executor_slot].cost += actual

    def _validation(self, tx: dict) -> None:
        rec, slot = self._record(tx["inference_id"]), tx["validator_slot"]
        self._slot(slot)
        if slot == rec.executor_slot:
            raise ApplyError("an executor cannot validate its own inference")
        if self._has_validated(rec, slot):
            return  # idempotent: a repeat from the same address is a no-op
        if rec.status not in (FINISHED, CHALLENGED, VALIDATED, INVALIDATED):
            raise ApplyError(f"validation needs Finished or later, record is {rec.status}")
        self._may_sign(slot, tx["signer"])
        if tx["escrow_id"] != self.escrow_id:
            raise ApplyError(f"escrow id {tx['escrow_id']!r} is not {self.escrow_id!r}")
        rec.validated_by |= 1 << slot
        if rec.status == FINISHED:
            if tx["valid"]:
                rec.votes_valid += self._weight(slot)
            else:
                rec.votes_invalid += self._weight(slot)
                rec.status = CHALLENGED

    def _validation_vote(self, tx: dict) -> None:
        rec, slot = self._record(tx["inference_id"]), tx["voter_slot"]
        self._slot(slot)
        if rec.status in (VALIDATED, INVALIDATED):
            return
        if rec.status != CHALLENGED:
            raise ApplyError(f"vote needs Challenged, record is {rec.status}")
        if self._has_validated(rec, slot):
            raise ApplyError(f"slot {slot}: its address already voted")
        self._may_sign(slot, tx["signer"])
        if tx["escrow_id"] != self.escrow_id:
            raise ApplyError(f"escrow id {tx['escrow_id']!r} is not {self.escrow_id!r}")
        for i in self._slots_of(slot):
            rec.validated_by |= 1 << i
        if tx["vote_valid"]:
            rec.votes_valid += self._weight(slot)
        else:
            rec.votes_invalid += self._weight(slot)
        if rec.votes_invalid > self.config.vote_threshold:
            rec.status = INVALIDATED
            hs = self.state.host_stats[rec.executor_slot]
            hs.invalid += 1
            hs.cost = max(hs.cost - rec.actual_cost, 0)
            self.state.balance += rec.actual_cost
        elif rec.votes_valid > self.config.vote_threshold:
            rec.status = VALIDATED

    def _timeout(self, tx: dict) -> None:
        rec, reason = self._record(tx["inference_id"]), tx["reason"]
        if (reason, rec.status) not in ((REFUSED, PENDING), (EXECUTION, STARTED)):
            raise ApplyError(f"timeout reason {reason} does not fit status {rec.status}")
        accept, seen = 0, set()
        for slot, accepts, signer in tx["votes"]:
            address = self._slot(slot)
            if address in seen:
                raise ApplyError(f"slot {slot}: its address already voted")
            seen.add(address)
            self._may_sign(slot, signer)
            accept += self._weight(slot) if accepts else 0
        if accept <= self.config.vote_threshold:
            raise ApplyError(f"need more than {self.config.vote_threshold} accept votes, got {accept}")
        rec.status = TIMED_OUT
        self.state.host_stats[rec.executor_slot].missed += 1
        self.state.balance += rec.reserved_cost

    def _finalize(self, tx: dict) -> None:
        if self.state.phase != sr.ACTIVE:
            raise ApplyError("already finalizing")
        self.state.phase = sr.FINALIZING

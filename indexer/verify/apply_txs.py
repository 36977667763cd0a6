"""The per-tx rules of :class:`indexer.verify.apply.Session`, ported from gonka-ai/gonka ``devshard/state/machine.go``
(@bb34d444 for v4.1, @c6c474aa for v5: ``applyStartInference``, ``applyConfirmStart``, ``applyFinishInference``,
``applyValidation``, ``applyValidationVote``, ``applyTimeout``, ``applyErrorMiss``, ``applyFinalizeRound``) and
``devshard/state/heightsync.go`` @c6c474aa (``applyForceHeightSyncTurn``, ``applyHeartbeat``, ``applyHeightAck``) and
``devshard/heightsync`` ``ComputeCadenceSwallow``. Where the lines differ, :class:`indexer.verify.versions.Rules` says
which way the session goes. Each handler checks first and mutates last, so a refused tx leaves no trace.
"""
from __future__ import annotations

from indexer.verify import signatures as sig
from indexer.verify import state_root as sr
from indexer.verify.state_root import (CHALLENGED, FINISHED, INVALIDATED, PENDING, STARTED, TIMED_OUT, VALIDATED,
                                       HostStats, Record)

REFUSED, EXECUTION = 1, 2  # TimeoutReason


class ApplyError(ValueError):
    """A diff the protocol refuses (the message names nonce, tx index and the broken rule). ``unknown_signer`` is
    (the slot's address, the key its signature recovered to) when the refusal is a host signature by a key that is
    neither the slot's nor a warm key the caller knows of: a grant not captured would change the answer."""

    def __init__(self, message: str, unknown_signer: tuple[str, str] | None = None):
        super().__init__(message)
        self.unknown_signer = unknown_signer


def clone(obj):
    """A shallow copy of a Record or HostStats (every field is an int, bytes or str)."""
    out = obj.__class__.__new__(obj.__class__)
    out.__dict__.update(obj.__dict__)
    return out


def cadence_swallow(forced_start: int, forced_end: int, anchor_k: int, slots: int) -> tuple[int, int]:
    """``ComputeCadenceSwallow``: when a forced turn ends strictly inside a periodic anchor window
    [i·K, i·K + slots − 1], the cadence tail up to that window's end is swallowed: (window end, forced end); else
    (0, 0)."""
    if anchor_k == 0 or slots == 0 or anchor_k < slots:
        return 0, 0
    i = 1
    while i * anchor_k <= forced_end + anchor_k:
        start, end = i * anchor_k, i * anchor_k + slots - 1
        if forced_start <= end and forced_end >= start and start < forced_end < end:
            return end, forced_end
        i += 1
    return 0, 0


class TxRules:
    """Mixin: expects ``state``, ``slots``, ``config``, ``rules``, ``escrow_id``, ``sealed_nonces``, ``warm_resolver``,
    ``recover`` (the signature recovery, :func:`indexer.verify.signatures.recover_address` or a memo of it) and
    ``_journal`` (None, or the open diff's :class:`indexer.verify.apply.Journal`)."""

    # ---- helpers
    def _record(self, inference_id: int) -> Record:
        """The live record, writable: while a diff may still be rolled back, it is copied on its first write so the
        diff's journal keeps the original (see :class:`indexer.verify.apply.Journal`)."""
        rec = self.state.live.get(inference_id)
        if rec is None:
            where = "sealed" if inference_id in self.sealed_nonces else "unknown"
            raise ApplyError(f"inference {inference_id} is {where}")
        journal = self._journal
        if journal is not None and inference_id not in journal.records:
            journal.records.add(inference_id)
            rec = self.state.live[inference_id] = clone(rec)
        return rec

    def _stats(self, slot: int) -> HostStats:
        """A slot's host stats, writable (copied on first write while a diff may be rolled back)."""
        stats = self.state.host_stats[slot]
        journal = self._journal
        if journal is not None and slot not in journal.stats:
            journal.stats.add(slot)
            stats = self.state.host_stats[slot] = clone(stats)
        return stats

    def _slot(self, slot: int) -> str:
        if not 0 <= slot < len(self.slots):
            raise ApplyError(f"slot {slot} is not in the group of {len(self.slots)}")
        return self.slots[slot]

    def _may_sign(self, slot: int, signer: str) -> None:
        """The slot's address signed, or its warm key (bound once, then fixed for the session)."""
        cold = self._slot(slot)
        if isinstance(signer, sig.Unrecovered):
            raise ApplyError(f"slot {slot}: {signer}")
        if signer == cold:
            return
        bound = self.state.warm_keys.get(slot)
        if bound is not None:
            if bound != signer:
                raise ApplyError(f"slot {slot}: signed by {signer}, its warm key is {bound}")
            return
        if self.warm_resolver is None or not self.warm_resolver(slot, signer):
            raise ApplyError(f"slot {slot}: signed by {signer}, neither {cold} nor an authorised warm key",
                             (cold, signer))
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

    def _stamp(self, tx: dict) -> int:
        """The block height a start or confirm writes into its record: v5 keeps it when the hash is present
        (``heightsync.StampPresent``: a non-empty ``observed_block_hash``); earlier lines keep none."""
        if self.rules.stamps and tx.get("observed_block_hash"):
            return tx.get("observed_height", 0)
        return 0

    def _tally(self, votes, content) -> int:
        """Accept weight of a timeout or error-miss vote list: one vote per address, each signer authorised for its
        slot. A vote is (slot, accept, signer address) or (slot, accept, 65-byte signature over ``content(accept)``)."""
        accept, seen = 0, set()
        for slot, accepts, signer in votes:
            address = self._slot(slot)
            if address in seen:
                raise ApplyError(f"slot {slot}: its address already voted")
            seen.add(address)
            if isinstance(signer, bytes):
                try:
                    signer = self.recover(content(accepts), signer)
                except sig.SignatureError as exc:
                    raise ApplyError(f"vote from slot {slot}: {exc}") from None
            self._may_sign(slot, signer)
            accept += self._weight(slot) if accepts else 0
        if accept <= self.config.vote_threshold:
            raise ApplyError(f"need more than {self.config.vote_threshold} accept votes, got {accept}")
        return accept

    # ---- transactions (each takes the tx and the diff's nonce)
    def _start(self, tx: dict, nonce: int) -> None:
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
                           max_tokens=tx["max_tokens"], reserved_cost=reserved, started_at=tx["started_at"],
                           started_at_height=self._stamp(tx))

    def _confirm_start(self, tx: dict, nonce: int) -> None:
        rec = self._record(tx["inference_id"])
        if rec.status != PENDING:
            raise ApplyError(f"confirm needs Pending, record is {rec.status}")
        signer = tx.get("signer")
        if signer is None:  # the receipt covers the record's start fields, so it is recovered here, against state
            height, block = (tx.get("observed_height", 0), tx.get("observed_block_hash", b"")) if self.rules.stamps \
                else (0, b"")
            if (height or block) and self.rules.receipt_height_fields is None:
                raise sr.UnsupportedVersion(
                    f"the confirm of inference {tx['inference_id']} signs a block-height stamp: the "
                    f"ExecutorReceiptContent numbers of observed_height / observed_block_hash are in no stored "
                    f"upstream diff.proto (machine.go @c6c474aa signs them), so its receipt cannot be rebuilt")
            receipt = sig.executor_receipt_bytes(
                inference_id=tx["inference_id"], prompt_hash=rec.prompt_hash, model=rec.model,
                input_length=rec.input_length, max_tokens=rec.max_tokens, started_at=rec.started_at,
                escrow_id=self.escrow_id, confirmed_at=tx["confirmed_at"], observed_height=height,
                observed_block_hash=block, height_fields=self.rules.receipt_height_fields)
            try:
                signer = self.recover(receipt, tx["executor_sig"])
            except sig.SignatureError as exc:
                raise ApplyError(f"executor receipt: {exc}") from None
        self._may_sign(rec.executor_slot, signer)
        rec.status, rec.confirmed_at = STARTED, tx["confirmed_at"]
        rec.confirmed_at_height = self._stamp(tx)

    def _finish(self, tx: dict, nonce: int) -> None:
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
        self._stats(rec.executor_slot).cost += actual

    def _validation(self, tx: dict, nonce: int) -> None:
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

    def _validation_vote(self, tx: dict, nonce: int) -> None:
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
            hs = self._stats(rec.executor_slot)
            hs.invalid += 1
            hs.cost = max(hs.cost - rec.actual_cost, 0)
            self.state.balance += rec.actual_cost
        elif rec.votes_valid > self.config.vote_threshold:
            rec.status = VALIDATED

    def _timeout(self, tx: dict, nonce: int) -> None:
        i, reason = tx["inference_id"], tx["reason"]
        rec = self._record(i)
        if (reason, rec.status) not in ((REFUSED, PENDING), (EXECUTION, STARTED)):
            raise ApplyError(f"timeout reason {reason} does not fit status {rec.status}")
        self._tally(tx["votes"], lambda accept: sig.timeout_vote_bytes(
            escrow_id=self.escrow_id, inference_id=i, reason=reason, accept=accept))
        rec.status = TIMED_OUT
        self._stats(rec.executor_slot).missed += 1
        self.state.balance += rec.reserved_cost

    def _error_miss(self, tx: dict, nonce: int) -> None:
        """A Finished inference whose signed body is an error: refund the client in full, unpay the host, count a
        miss. The votes sign the record's response hash."""
        i = tx["inference_id"]
        rec = self._record(i)
        if rec.status != FINISHED:
            raise ApplyError(f"error-miss needs Finished, record is {rec.status}")
        self._tally(tx["votes"], lambda accept: sig.error_miss_vote_bytes(
            escrow_id=self.escrow_id, inference_id=i, accept=accept, response_hash=rec.response_hash))
        rec.status = TIMED_OUT
        hs = self._stats(rec.executor_slot)
        hs.missed += 1
        self.state.balance += rec.actual_cost
        hs.cost = max(hs.cost - rec.actual_cost, 0)

    def _finalize(self, tx: dict, nonce: int) -> None:
        if self.state.phase != sr.ACTIVE:
            raise ApplyError("already finalizing")
        self.state.phase = sr.FINALIZING

    def _force_height_sync_turn(self, tx: dict, nonce: int) -> None:
        if self.state.phase != sr.ACTIVE:
            raise ApplyError("session is finalizing")
        slots = len(self.slots)
        if tx["trigger_nonce"] != nonce:
            raise ApplyError(f"trigger_nonce {tx['trigger_nonce']} must equal the diff nonce {nonce}")
        if tx["slots_num"] != slots:
            raise ApplyError(f"slots_num {tx['slots_num']} must equal the group size {slots}")
        if tx["anchor_k"] < tx["slots_num"]:
            raise ApplyError(f"anchor_k {tx['anchor_k']} below slots_num {tx['slots_num']}")
        if tx["end_nonce"] != tx["trigger_nonce"] + tx["slots_num"] - 1:
            raise ApplyError(f"end_nonce {tx['end_nonce']} must be trigger_nonce + slots_num - 1")
        h = self.state.height_sync
        if h.forced_end and nonce <= h.forced_end:
            return  # a forced turn already covers this nonce: a duplicate open is a no-op
        until, swallow_fe = cadence_swallow(tx["trigger_nonce"], tx["end_nonce"], tx["anchor_k"], tx["slots_num"])
        self.state.height_sync = sr.HeightSyncCommit(
            forced_start=tx["trigger_nonce"], forced_end=tx["end_nonce"], cadence_swallow_until=until,
            swallow_fe=swallow_fe, turn_k=tx["anchor_k"], turn_slots=tx["slots_num"], reason=tx["reason"])

    def _heartbeat(self, tx: dict, nonce: int) -> None:
        if self.state.phase != sr.ACTIVE:
            raise ApplyError("session is finalizing")

    _height_ack = _heartbeat  # admission only; both are judged by the log plane, which is not replayed here

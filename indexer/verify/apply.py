"""The devshard session state machine the state root needs, ported per protocol line (:mod:`indexer.verify.versions`
says which line a version name follows and cites its upstream files): ``NewStateMachine``, ``applyCore``,
``settleLiveRecordLocked``, ``autoSealLocked``, ``stateClockLocked``, ``drainLiveIntoSealedAccLocked`` and
``clearExpiredHeightSyncFlags`` here; the per-tx ``apply*`` functions in :mod:`indexer.verify.apply_txs`.

It keeps only what the root commits (records, host stats, balance, fees, phase, sealed accumulator, warm keys, the v5
height-sync commit), not indexer.replay.machine's view (statuses and transitions for the rules; it tracks no costs,
balance or seals). Signatures are recovered before this module (indexer.verify.diff): a tx here carries the address
its signature recovered to (``signer``); a confirm or an error-miss vote may carry its raw signature instead, recovered
here because what it signs includes record fields. This module then decides whether that address may act for the
slot (the slot's own address, or a warm key the caller has established, bound on first use as ``ResolveWarmKey``
does). Any rule a tx breaks raises :class:`ApplyError` naming the nonce, tx index and rule; the whole diff is then
refused.

v5 height sync: the root-bearing part is replayed (``MsgForceHeightSyncTurn`` sets the escrow commit, expired flags
clear after each nonce); the log-plane admission checks (``heightsync.CheckDiffLogPlane`` L0–L7: heartbeat and ack
signatures, the height floor) are not, since they decide only whether a diff is admitted, never what its root is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from indexer.verify import signatures as sig, state_root as sr
from indexer.verify.apply_txs import REFUSED, EXECUTION, ApplyError, TxRules  # noqa: F401 (re-exported)
from indexer.verify.state_root import FINISHED, PENDING, STARTED, TIMED_OUT, HostStats, Record, State
from indexer.verify.versions import NotCheckable, Rules, rules_for

STATE_CLOCK_WINDOW_FACTOR = 3  # seal.go stateClockWindowFactor
_SEALABLE = {FINISHED, sr.VALIDATED, sr.INVALIDATED, TIMED_OUT}
_TERMINAL = {sr.VALIDATED, sr.INVALIDATED, TIMED_OUT}


@dataclass(frozen=True)
class Config:
    token_price: int
    vote_threshold: int
    seal_grace_nonces: int | None  # None: 0 published, whose build default is not known here (sealing rules refuse)
    seal_grace_seconds: int
    auto_seal_every: int = 1  # 0 means the build's compiled default upstream, which is not known here: refused
    fee_per_nonce: int = 0
    create_fee: int = 0  # CreateDevshardFee, charged once when the session starts
    execution_timeout: int | None = None  # seconds; v5 seals a Finished record after grace + this (None = unstated)


@dataclass
class Journal:
    """What a diff may change, saved so it can be undone: the scalars, shallow copies of the live map, the host-stats
    map and the warm keys, the ids it sealed, and which records and host stats it has copied on first write (their
    originals stay in the saved maps)."""
    balance: int
    fees: int
    phase: int
    sealed_acc: bytes
    height_sync: sr.HeightSyncCommit
    live: dict
    host_stats: dict
    warm_keys: dict
    latest_nonce: int
    finalize_nonce: int
    records: set = field(default_factory=set)
    stats: set = field(default_factory=set)
    sealed: list = field(default_factory=list)

    @classmethod
    def open(cls, session: "Session") -> "Journal":
        s = session.state
        return cls(s.balance, s.fees, s.phase, s.sealed_acc, s.height_sync, dict(s.live), dict(s.host_stats),
                   dict(s.warm_keys), session.latest_nonce, session.finalize_nonce)

    def restore(self, session: "Session") -> None:
        s = session.state
        s.balance, s.fees, s.phase, s.sealed_acc, s.height_sync = (self.balance, self.fees, self.phase,
                                                                   self.sealed_acc, self.height_sync)
        s.live, s.host_stats, s.warm_keys = self.live, self.host_stats, self.warm_keys
        session.latest_nonce, session.finalize_nonce = self.latest_nonce, self.finalize_nonce
        for i in self.sealed:
            del session.sealed_nonces[i]


@dataclass
class Session(TxRules):
    """One escrow's session: :class:`State` plus what applying needs and the root leaves out."""
    escrow_id: str
    config: Config
    slots: tuple[str, ...]  # index = slot id, value = the slot's (cold) address
    state: State
    rules: Rules
    latest_nonce: int = 0
    finalize_nonce: int = 0
    sealed_nonces: dict[int, int] = field(default_factory=dict)
    warm_resolver: Callable[[int, str], bool] | None = None  # (slot, recovered address) -> authorised?
    stopped: str | None = None  # why a diff applied without rollback was refused (the session applies no more)
    recover: Callable[[bytes, bytes], str] = sig.recover_address  # signatures recovered against state (receipts, votes)
    _journal: "Journal | None" = field(default=None, repr=False, compare=False)

    @classmethod
    def new(cls, escrow_id: str, config: Config, slots: tuple[str, ...], balance: int, version: str,
            warm_resolver: Callable[[int, str], bool] | None = None, rules: Rules | None = None) -> "Session":
        """``rules`` defaults to the line ``version`` follows; pass one to replay under named assumptions
        (:func:`indexer.verify.versions.with_height_fields`)."""
        rules = rules or rules_for(version)
        if not slots:
            raise ApplyError("an escrow with no slots cannot host inferences")
        if rules.seals and config.auto_seal_every <= 0:
            raise ApplyError("auto_seal_every must be a positive interval (0 selects a build default not known here)")
        if rules.seals and config.seal_grace_nonces is None:
            raise NotCheckable("the session's inference_seal_grace_nonces is 0, which selects its build's compiled "
                               "default (max(group size × a multiplier, 20), not the same in every build)")
        if rules.clock_adds_execution_timeout and config.execution_timeout is None:
            raise NotCheckable(f"the {rules.line} rules seal a Finished record after seal_grace_seconds + "
                             f"execution_timeout: the session's execution_timeout must be stated")
        if balance < config.create_fee:
            raise ApplyError(f"create devshard fee {config.create_fee} exceeds escrow amount {balance}")
        state = State(version=version, balance=balance - config.create_fee, fees=config.create_fee,
                      host_stats={i: HostStats() for i in range(len(slots))},
                      record_height_fields=rules.record_height_fields)
        return cls(escrow_id, config, tuple(slots), state, rules, warm_resolver=warm_resolver)

    def root(self) -> bytes:
        return sr.state_root(self.state)

    def apply(self, nonce: int, txs: list[dict], rollback: bool = True) -> bytes:
        """Apply one diff (txs in order) and return its post_state_root.

        With ``rollback`` (the default) a refused diff leaves the session as it was: the diff runs under a
        :class:`Journal` (records and host stats copied on their first write, scalars and the small maps saved).
        Without it nothing is saved, for a replay that ends at its first refusal anyway (verification): a refused
        diff then leaves the session stopped, and any later apply raises :class:`ApplyError` naming why."""
        if self.stopped is not None:
            raise ApplyError(f"nonce {nonce}: the session stopped at an earlier refusal ({self.stopped})")
        if nonce != self.latest_nonce + 1:
            raise ApplyError(f"nonce {nonce}: expected {self.latest_nonce + 1}")
        starts = [t for t in txs if t.get("kind") == "start"]
        if len(starts) > 1 or any(t.get("inference_id") != nonce for t in starts):
            raise ApplyError(f"nonce {nonce}: at most one start, with inference_id == nonce")
        if sum(t.get("kind") == "force_height_sync_turn" for t in txs) > 1:
            raise ApplyError(f"nonce {nonce}: at most one force_height_sync_turn")
        self._journal = Journal.open(self) if rollback else None
        try:
            for index, tx in enumerate(txs):
                try:
                    if tx.get("kind") not in self.rules.kinds:
                        raise ApplyError(f"tx kind {tx.get('kind')!r} is not in the {self.rules.line} rules")
                    getattr(self, "_" + tx["kind"])(tx, nonce)
                except (KeyError, ApplyError) as exc:
                    raise ApplyError(f"nonce {nonce} tx {index} ({tx.get('kind')}): {exc}",
                                     getattr(exc, "unknown_signer", None)) from None
            self._close(nonce)
            return self.root()
        except Exception as exc:
            if self._journal is not None:
                self._journal.restore(self)
            else:
                self.stopped = f"nonce {nonce}: {exc}"
            raise
        finally:
            self._journal = None

    # ---- per-nonce bookkeeping (applyCore steps 5-6b)
    def _close(self, nonce: int) -> None:
        s = self.state
        if s.phase == sr.ACTIVE:
            if s.balance < self.config.fee_per_nonce:
                raise ApplyError(f"nonce {nonce}: balance {s.balance} below the per-nonce fee")
            s.balance -= self.config.fee_per_nonce
            s.fees += self.config.fee_per_nonce
        self.latest_nonce = nonce
        if self.rules.height_sync:
            self._clear_expired_height_sync(nonce)
        if s.phase == sr.FINALIZING and self.finalize_nonce == 0:
            self.finalize_nonce = nonce
        if s.phase == sr.FINALIZING and nonce >= self.finalize_nonce + len(self.slots):
            s.phase = sr.SETTLEMENT
            for i in sorted(s.live) if self.rules.seals else ():  # v1: the drain is a no-op
                self._settle_live(self._record(i))
                self._seal(i, nonce)
        if self.rules.seals and s.phase == sr.ACTIVE and nonce % self.config.auto_seal_every == 0:
            self._auto_seal(nonce)

    def _clear_expired_height_sync(self, nonce: int) -> None:
        """``clearExpiredHeightSyncFlags`` (heightsync.go @c6c474aa), run once the nonce is the latest."""
        h = self.state.height_sync
        if h.forced_end and nonce > h.forced_end:
            h = sr.HeightSyncCommit(0, 0, h.cadence_swallow_until, h.swallow_fe, h.turn_k, h.turn_slots, h.reason)
        if h.cadence_swallow_until and nonce > h.cadence_swallow_until:
            h = sr.HeightSyncCommit(h.forced_start, h.forced_end)
        self.state.height_sync = h

    def _seal(self, inference_id: int, nonce: int) -> None:
        s = self.state
        entry = sr.record_entry(inference_id, s.live[inference_id], s.record_height_fields)
        s.sealed_acc = sr.fold_sealed(s.sealed_acc, nonce, inference_id, entry)
        self.sealed_nonces[inference_id] = nonce
        if self._journal is not None:
            self._journal.sealed.append(inference_id)
        del s.live[inference_id]

    def _state_clock(self) -> int:
        """Max confirmed_at over confirmed records among the newest 3·N live ids; 0 when unknown."""
        ids = sorted(self.state.live)[-(len(self.slots) * STATE_CLOCK_WINDOW_FACTOR or STATE_CLOCK_WINDOW_FACTOR):]
        return max((self.state.live[i].confirmed_at for i in ids if self.state.live[i].confirmed_at > 0), default=0)

    def _clock_required(self) -> int:
        """Seconds the state clock must pass a Finished record's confirmed_at (``FinishedClockRequiredSeconds``)."""
        grace = max(self.config.seal_grace_seconds, 0)
        if self.rules.clock_adds_execution_timeout:
            return grace + max(self.config.execution_timeout or 0, 0)
        return grace

    def _auto_seal(self, nonce: int) -> None:
        clock = self._state_clock() if self.state.live else 0
        if clock == 0:
            return
        required = self._clock_required()
        due = []
        for i, rec in self.state.live.items():
            if rec.status not in _SEALABLE or nonce < i + self.config.seal_grace_nonces:
                continue
            if rec.status in _TERMINAL or required - (clock - rec.confirmed_at) <= 0:
                due.append(i)
        for i in sorted(due):
            self._seal(i, nonce)

    def _settle_live(self, rec: Record) -> None:
        if rec.status == STARTED or (rec.status == PENDING and self.rules.drain_pays_pending):
            rec.actual_cost, rec.status = rec.reserved_cost, FINISHED
            self._stats(rec.executor_slot).cost += rec.reserved_cost
        elif rec.status == PENDING:
            self.state.balance += rec.reserved_cost
            rec.actual_cost, rec.status = 0, TIMED_OUT

"""Diff-log engine for one simulated escrow: an agenda of follow-up actions packed into diffs.

Each nonce gets one diff. While inferences remain, the diff opens with one ``MsgStartInference``
(so ``inference_id == nonce``, as the protocol requires) and then carries due follow-ups (receipts,
finishes, validations, votes, timeouts). Every tx is applied to the reference
:class:`~indexer.devnet.state.EscrowState` the moment it is emitted, so later actions see the state
a host would see, and an illegal tx fails loudly instead of producing a bogus log. After the last
follow-up the user finalizes the round; one empty diff per slot follows, after which the session is
in its settlement phase (``applyCore``: settlement starts ``len(group)`` nonces after the finalize).
Hosts sign what they propose with their warm keys (:meth:`Engine.host_sign`).
"""

from __future__ import annotations

import hashlib
import heapq
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from indexer.devnet.keys import Keyring
from indexer.devnet.models import HostSpec, ModelSpec
from indexer.devnet.state import EscrowState

MAX_FOLLOWUPS_PER_DIFF = 4
SECONDS_PER_NONCE = 3  # compressed devnet clock: timeouts fire after a few nonces, not 60 s / 32 min


@dataclass
class EscrowContext:
    escrow_id: str
    epoch_index: int
    model: ModelSpec
    slots: list[str]
    hosts: dict[str, HostSpec]  # address -> host
    token_price: int
    vote_threshold_factor: int
    protocol_version: str
    start_time: int
    start_height: int
    inferences: int
    keys: Keyring
    heartbeats: bool = True  # the version's DevshardTx has MsgHeartbeat (v5 height sync)


@dataclass
class EscrowLog:
    diffs: list[dict[str, Any]] = field(default_factory=list)  # DiffContent dicts (bytes values)
    records: list[dict[str, Any]] = field(default_factory=list)  # expected normalized tx records
    payloads: dict[int, str] = field(default_factory=dict)  # inference_id -> stored response body
    prompts: dict[int, dict[str, Any]] = field(default_factory=dict)  # inference_id -> PayloadJSON
    labels: dict[int, dict[str, Any]] = field(default_factory=dict)  # inference_id -> scenario facts
    other: dict[str, int] = field(default_factory=dict)  # skipped tx kinds (heartbeat, finalize_round)
    receipts: dict[int, bytes] = field(default_factory=dict)  # inference_id -> the executor's receipt signature
    validation_sampled: dict[int, int] = field(default_factory=dict)  # slot -> validations the sampler asked of it


def block_hash(height: int) -> bytes:
    return hashlib.sha256(f"devnet-block-{height}".encode()).digest()


class Engine:
    def __init__(self, rng: random.Random, ctx: EscrowContext) -> None:
        self.rng = rng
        self.ctx = ctx
        self.state = EscrowState(ctx.slots, ctx.vote_threshold_factor, ctx.token_price, ctx.protocol_version)
        self.log = EscrowLog()
        self.nonce = 0
        self._agenda: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self._txs: list[dict[str, Any]] = []
        self._shortfalls = 0  # vote rounds of this diff that fell short (work done, nothing to submit)

    # -- time ---------------------------------------------------------------------------------
    def now(self) -> int:
        return self.ctx.start_time + self.nonce * SECONDS_PER_NONCE

    def height(self) -> int:
        return self.ctx.start_height + self.nonce

    # -- group helpers ------------------------------------------------------------------------
    def host_of_slot(self, slot: int) -> HostSpec:
        return self.ctx.hosts[self.ctx.slots[slot]]

    def limit_of(self, address: str) -> int:
        return self.ctx.hosts[address].limit(self.ctx.model)

    def first_slot(self, address: str) -> int:
        return self.ctx.slots.index(address)

    def host_sign(self, address: str, message: bytes) -> bytes:
        """The signature of host ``address`` (with its warm key) over ``message``."""
        return self.ctx.keys.sign_as_host(address, message)

    def addresses(self, exclude: tuple[str, ...] = ()) -> list[str]:
        """Distinct group addresses in slot order (one voter per address)."""
        seen: list[str] = []
        for addr in self.ctx.slots:
            if addr not in seen and addr not in exclude:
                seen.append(addr)
        return seen

    # -- agenda -------------------------------------------------------------------------------
    def later(self, delay: int | tuple[int, int], action: Callable[[], None]) -> None:
        """Run ``action`` in the diff ``delay`` nonces from now (a (lo, hi) range is drawn)."""
        if isinstance(delay, tuple):
            delay = self.rng.randint(*delay)
        self._seq += 1
        heapq.heappush(self._agenda, (self.nonce + max(1, delay), self._seq, action))

    def run(self, new_inference: Callable[[], None]) -> EscrowLog:
        remaining = self.ctx.inferences
        while remaining or self._agenda:
            self.nonce += 1
            if remaining:
                new_inference()
                remaining -= 1
            self._run_due(force=not self._txs)
            if (not (self._txs or self._shortfalls) or self.rng.random() < 0.03) and self.ctx.heartbeats:
                self.push("heartbeat", {})  # liveness txs exist on the wire; the indexer skips them
            self._close_diff()
        self.nonce += 1
        self.push("finalize_round", {})
        self._close_diff()
        for _ in self.ctx.slots:  # the finalizing nonces: the session enters settlement after the last one
            self.nonce += 1
            self._close_diff()
        self.state.settle()
        return self.log

    def _run_due(self, force: bool) -> None:
        done = 0
        while self._agenda and done < MAX_FOLLOWUPS_PER_DIFF:
            due, _, action = self._agenda[0]
            if due > self.nonce and not (force and done == 0):
                break  # with no start left, an idle nonce pulls the next action forward
            heapq.heappop(self._agenda)
            before = len(self._txs) + self._shortfalls
            action()
            done += len(self._txs) + self._shortfalls - before

    # -- emission -----------------------------------------------------------------------------
    def shortfall(self) -> None:
        """A vote round (timeout or error-miss) that fell short of the threshold: the gateway collected the votes
        but has nothing to submit. It counts as a follow-up of this diff, as a submitted tx would."""
        self._shortfalls += 1

    def push(self, name: str, msg: dict[str, Any]) -> None:
        """Emit one tx into the current diff and apply it to the reference state right away."""
        self.state.apply(name, msg, self.nonce)
        tx_index = len(self._txs)
        self._txs.append({name: msg})
        rec = expected_record(self.ctx, name, msg, self.nonce, tx_index)
        if rec is None:
            self.log.other[name] = self.log.other.get(name, 0) + 1
            return
        if rec["kind"] == "finish" and msg["inference_id"] in self.log.payloads:
            rec["response_payload"] = self.log.payloads[msg["inference_id"]]
        self.log.records.append(rec)

    def _close_diff(self) -> None:
        self.log.diffs.append({"nonce": self.nonce, "txs": self._txs, "escrow_id": self.ctx.escrow_id,
                               "post_state_root": b"", "sealed_inference_ids": []})
        self._txs, self._shortfalls = [], 0


def _votes(votes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"voter_slot": v["voter_slot"], "accept": v["accept"]} for v in votes]


def expected_record(ctx: EscrowContext, name: str, m: dict[str, Any], nonce: int, idx: int) -> dict[str, Any] | None:
    """The normalized record (interface.md §2) of one emitted tx, written independently of
    ``indexer.wire.normalize`` so the devnet can check that module end to end."""
    base = {"escrow_id": ctx.escrow_id, "inference_id": m.get("inference_id")}
    tail = {"diff_nonce": nonce, "tx_index": idx, "protocol_version": ctx.protocol_version}
    if name == "start_inference":
        return {"kind": "start", **base, **tail, "prompt_hash": m["prompt_hash"].hex(), "model": m["model"],
                "input_length": m["input_length"], "max_tokens": m["max_tokens"], "started_at": m["started_at"]}
    if name == "confirm_start":
        return {"kind": "confirm_start", **base, **tail, "confirmed_at": m["confirmed_at"]}
    if name == "finish_inference":
        return {"kind": "finish", **base, **tail, "executor_slot": m["executor_slot"],
                "input_tokens": m["input_tokens"], "output_tokens": m["output_tokens"],
                "response_hash": m["response_hash"].hex(),
                **({"served_hash": m["served_hash"].hex()} if m.get("served_hash") else {})}
    if name == "validation":
        return {"kind": "validation", **base, "validator_slot": m["validator_slot"], **tail, "valid": m["valid"]}
    if name == "validation_vote":
        return {"kind": "validation_vote", **base, "voter_slot": m["voter_slot"], **tail,
                "vote_valid": m["vote_valid"]}
    if name == "timeout_inference":
        reason = {1: "refused", 2: "execution"}[m["reason"]]
        return {"kind": "timeout", **base, **tail, "reason": reason, "votes": _votes(m["votes"])}
    if name == "error_miss":
        return {"kind": "error_miss", **base, **tail, "votes": _votes(m["votes"])}
    return None

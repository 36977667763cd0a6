"""Seedable generator of a simulated Gonka devshard network (``Scenario``).

``Scenario(ScenarioConfig(seed=…))`` builds, per epoch, the model snapshots, escrows (16 slots over
6–8 hosts) and each escrow's complete diff log, stored payloads, labels and ground truth (final
statuses and per-slot host stats from the reference state machine). Everything derives from one
``random.Random(seed)``, so equal configs give byte-identical networks. Keys derive from the seed too
(:mod:`indexer.devnet.keys`): every tx carries its proposer's real signature, every diff the real state root and
the user's signature (:mod:`indexer.devnet.sealing`), and every escrow a settlement transaction with the hosts'
quorum signatures (:mod:`indexer.devnet.settling`).

The devnet clock is explicit: :class:`indexer.devnet.world.Devnet` decides what is visible,
settled or pruned at its current epoch; the scenario itself is immutable data.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from indexer.devnet import sealing, settling
from indexer.devnet.engine import EscrowContext, EscrowLog
from indexer.devnet.flows import EscrowGenerator
from indexer.devnet.keys import Keyring
from indexer.devnet.models import MODELS, HostSpec, ModelSpec, host_name, make_hosts
from indexer.devnet.state import STATUS_NAMES, EscrowState, vote_threshold
from indexer.verify.apply import Config
from indexer.wire.schemas import schema_for


@dataclass(frozen=True)
class ScenarioConfig:
    seed: int = 2078
    epochs: int = 3
    escrows_per_epoch: int = 2
    inferences_per_escrow: int = 40
    hosts: int = 7
    first_epoch: int = 408
    first_escrow_id: int = 1971
    protocol_version: str = "v5"  # the newest mainnet-approved devshard version (indexer.wire.schemas)
    group_size: int = 16
    max_slots_per_host: int = 5  # keeps any single address below the 9-slot decision weight
    token_price: int = 10
    vote_threshold_factor: int = 50
    validation_rate: int = 1000
    escrow_amount: int = 5_000_000_000
    create_fee: int = 10_000  # CreateDevshardFee, charged when the session opens
    fee_per_nonce: int = 1_000  # charged per nonce while the session is active
    seal_grace_nonces: int = 160
    seal_grace_seconds: int = 3600
    auto_seal_every: int = 150
    max_nonce: int = 1_000_000
    blocks_per_epoch: int = 15391
    seconds_per_block: int = 6
    genesis_height: int = 2_450_000
    genesis_time: int = 1_790_812_800


@dataclass
class EscrowSim:
    escrow_id: str
    epoch_index: int
    model: ModelSpec
    slots: list[str]
    creator: str
    amount: int
    token_price: int
    vote_threshold_factor: int
    validation_rate: int
    protocol_version: str
    created_height: int
    log: EscrowLog
    state: EscrowState
    session_config: Config
    roots: list[bytes] = field(default_factory=list)
    user_sigs: list[bytes] = field(default_factory=list)
    sealed: sealing.Sealed | None = None
    settlement: settling.SettlementTx | None = None

    @property
    def diffs(self) -> list[dict[str, Any]]:
        return self.log.diffs

    @property
    def governance_limit(self) -> int:
        return self.model.governance_limit

    @property
    def last_nonce(self) -> int:
        return self.log.diffs[-1]["nonce"] if self.log.diffs else 0

    def statuses(self) -> dict[int, str]:
        return {i: STATUS_NAMES[r.status] for i, r in sorted(self.state.records.items())}

    def host_stats(self) -> list[dict[str, int]]:
        return [s.as_dict() for s in self.state.stats]

    @property
    def fees(self) -> int:
        """The fees the session charged: the create fee, then one fee per nonce while active."""
        if self.sealed is not None and self.sealed.session is not None:
            return self.sealed.session.state.fees
        finalize = next(d["nonce"] for d in self.diffs if any("finalize_round" in tx for tx in d["txs"]))
        return self.session_config.create_fee + self.session_config.fee_per_nonce * (finalize - 1)


@dataclass
class EpochSim:
    epoch_index: int
    start_height: int
    start_time: int
    models: list[ModelSpec]
    escrows: list[EscrowSim]


class Scenario:
    def __init__(self, config: ScenarioConfig | None = None) -> None:
        self.config = config or ScenarioConfig()
        self.rng = random.Random(self.config.seed)
        self.keys = Keyring(self.config.seed, [host_name(i) for i in range(self.config.hosts)])
        self.hosts: list[HostSpec] = make_hosts(self.rng, self.config.hosts, self.keys.host_address)
        self.hosts_by_address = {h.address: h for h in self.hosts}
        self.hosts_by_name = {h.name: h for h in self.hosts}
        self._lying: dict[tuple[str, str], tuple[list[dict[str, Any]], sealing.Sealed, int]] = {}
        self.epochs: list[EpochSim] = []
        next_id = self.config.first_escrow_id
        for i in range(self.config.epochs):
            epoch = self._epoch(self.config.first_epoch + i, next_id)
            next_id += len(epoch.escrows)
            self.epochs.append(epoch)
        self.escrows = {e.escrow_id: e for ep in self.epochs for e in ep.escrows}
        self._epoch_sums: dict[tuple[str, int], dict[str, dict[str, int]]] = {}  # see epoch_sums

    # -- lookups --------------------------------------------------------------------------------
    def epoch(self, epoch_index: int) -> EpochSim | None:
        return next((e for e in self.epochs if e.epoch_index == epoch_index), None)

    def epoch_start(self, epoch_index: int) -> tuple[int, int]:
        """(start height, start unix time) of any epoch, generated or not."""
        offset = epoch_index - self.config.first_epoch
        height = self.config.genesis_height + offset * self.config.blocks_per_epoch
        return height, self.config.genesis_time + offset * self.config.blocks_per_epoch * self.config.seconds_per_block

    # -- generation -----------------------------------------------------------------------------
    def _epoch(self, epoch_index: int, first_id: int) -> EpochSim:
        height, time = self.epoch_start(epoch_index)
        escrows = []
        for k in range(self.config.escrows_per_epoch):
            # rotate models so DeepSeek comes first, as in the reference scenario
            model = MODELS[((epoch_index - self.config.first_epoch) * self.config.escrows_per_epoch + k) % len(MODELS)]
            escrows.append(self._escrow(str(first_id + k), epoch_index, model, k, height + 5 + k, time))
        return EpochSim(epoch_index, height, time, list(MODELS), escrows)

    def _group(self, model: ModelSpec, raised_heavy: bool) -> list[str]:
        cfg = self.config
        k = min(len(self.hosts), self.rng.randint(6, 8))
        members = self.rng.sample(self.hosts, k)
        counts = [1] * k
        while sum(counts) < cfg.group_size:
            i = self.rng.randrange(k)
            if counts[i] < cfg.max_slots_per_host or all(c >= cfg.max_slots_per_host for c in counts):
                counts[i] += 1
        gov = model.governance_limit
        # alternate which side holds the big blocks, so challenges end both Invalidated and Validated
        members.sort(key=lambda h: (h.limit(model) > gov) != raised_heavy)
        counts.sort(reverse=True)
        pairs = list(zip(members, counts))
        self.rng.shuffle(pairs)  # contiguous slot blocks per host, in random host order (as in F3)
        return [h.address for h, c in pairs for _ in range(c)]

    def _escrow(self, escrow_id: str, epoch_index: int, model: ModelSpec, k: int, height: int, time: int) -> EscrowSim:
        cfg = self.config
        slots = self._group(model, raised_heavy=(epoch_index + k) % 2 == 0)
        heartbeats = "heartbeat" in schema_for(cfg.protocol_version).messages["DevshardTx"].by_name
        ctx = EscrowContext(escrow_id, epoch_index, model, slots, self.hosts_by_address, cfg.token_price,
                            cfg.vote_threshold_factor, cfg.protocol_version, time + 60 * (k + 1), height + 10,
                            cfg.inferences_per_escrow, self.keys, heartbeats)
        gen = EscrowGenerator(random.Random(self.rng.getrandbits(64)), ctx)
        log = gen.generate()
        session_config = Config(cfg.token_price, vote_threshold(len(slots), cfg.vote_threshold_factor),
                                cfg.seal_grace_nonces, cfg.seal_grace_seconds, cfg.auto_seal_every, cfg.fee_per_nonce,
                                cfg.create_fee)
        esc = EscrowSim(escrow_id, epoch_index, model, slots, self.keys.user, cfg.escrow_amount, cfg.token_price,
                        cfg.vote_threshold_factor, cfg.validation_rate, cfg.protocol_version, height, log, gen.state,
                        session_config)
        esc.sealed = sealing.seal(esc, self.keys)
        sealing.check_against_reference(esc, esc.sealed)
        for d, root in zip(esc.diffs, esc.sealed.roots):
            d["post_state_root"] = root
        esc.roots, esc.user_sigs = esc.sealed.roots, esc.sealed.user_sigs
        return esc

    def settlement(self, esc: EscrowSim, height: int) -> settling.SettlementTx | None:
        """The escrow's settlement transaction, broadcast at ``height`` (built once); None when the version's session
        rules are not ported (no settlement-phase state to sign)."""
        if esc.settlement is None and esc.sealed is not None and esc.sealed.session is not None:
            sequence = sorted(self.escrows).index(esc.escrow_id)  # the user's account sequence, one tx per escrow
            esc.settlement = settling.build_tx(settling.settle_msg(esc, self.keys, esc.sealed.session), self.keys,
                                               height, sequence)
        return esc.settlement

    # -- views over the data --------------------------------------------------------------------
    def host_diff_log(self, escrow: EscrowSim, lying: bool = False) -> list[tuple[dict, bytes, bytes]]:
        """(diff, user_sig, state_hash) per nonce as one host serves it; a lying host diverges (``lying``: False,
        True or a kind of :func:`indexer.devnet.sealing.fork`; True is ``altered``)."""
        if not lying:
            return list(zip(escrow.diffs, escrow.user_sigs, escrow.roots))
        diffs, sealed, _ = self.lying_log(escrow, "altered" if lying is True else lying)
        return list(zip(diffs, sealed.user_sigs, sealed.roots))

    def lying_log(self, escrow: EscrowSim, kind: str) -> tuple[list[dict[str, Any]], sealing.Sealed, int]:
        """(diffs with their served roots, sealed, first diverging nonce) of a lying host, worked out once."""
        key = (escrow.escrow_id, kind)
        if key not in self._lying:
            diffs, sealed, nonce = sealing.fork(escrow, self.keys, kind)
            for d, root in zip(diffs, sealed.roots):
                d["post_state_root"] = root
            self._lying[key] = (diffs, sealed, nonce)
        return self._lying[key]

    def epoch_sums(self, name: str, epoch_index: int,
                   compute: Callable[[int], dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
        """``compute(epoch_index)``, worked out once: the escrows' final states never change after generation, and
        the chain views that sum them over an epoch (a participant's epoch stats or performance) are asked once
        for every participant of the epoch. Callers read the result, never change it."""
        key = (name, epoch_index)
        sums = self._epoch_sums.get(key)
        if sums is None:
            sums = self._epoch_sums.setdefault(key, compute(epoch_index))
        return sums

    def host_epoch_stats(self, epoch_index: int) -> dict[str, dict[str, int]]:
        """Per participant: settlement sums over all its slots in all escrows of the epoch (§1.3)."""
        return self.epoch_sums("stats", epoch_index, self._host_epoch_stats)

    def _host_epoch_stats(self, epoch_index: int) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        epoch = self.epoch(epoch_index)
        for esc in epoch.escrows if epoch else []:
            for addr in dict.fromkeys(esc.slots):
                acc = out.setdefault(addr, {"missed": 0, "invalid": 0, "cost": 0, "required_validations": 0,
                                            "completed_validations": 0, "escrow_count": 0})
                acc["escrow_count"] += 1
                for slot, owner in enumerate(esc.slots):
                    if owner == addr:
                        for key, value in esc.state.stats[slot].as_dict().items():
                            acc[key] += value
        return out

    def tx_records(self, escrow_id: str) -> list[dict[str, Any]]:
        """Ground truth: the normalized tx records of an escrow, in (diff_nonce, tx_index) order."""
        return copy.deepcopy(self.escrows[escrow_id].log.records)

"""Seeded fault plans for the poller fault-injection suite (tests/poller/test_poller_faults.py), and what a plan makes
capturable.

A plan is a small devnet (a "shape") and a list of poll cycles. Before each cycle the devnet clock may move (one
epoch, or several: the poller was down longer than the pruning window), and during it any mix of: hosts down (this
cycle only, or for good), a whole escrow group down, slow hosts, chain nodes down (several chain URLs, the first
failing), escrows pruned by the chain between the cycle's listing and its fetch (the epoch ticked mid-cycle),
5xx/429/truncated bodies, a lying host, and the database connection terminated at the k-th transaction of the cycle;
and two races with the chain: the *settlement race* (the epoch ticks right after the cycle read the settlements, so
the current epoch's escrows are settled on chain with no settlement in what the cycle read, and the oldest epoch's
are pruned) and the *snapshot race* (the node keeps only a short stretch of state in some cycles, so an ended
epoch's parameters read then are live values, flagged inexact; an exact snapshot read in another cycle must
survive them). Everything derives from ``random.Random(seed)`` (the races from a second generator of the same seed,
so the other faults of a seed are what they were before the races existed); the simulation below says, from the
plan alone, which escrows the poller can capture and which epochs' parameters it reads exactly.

Capturable, precisely (per escrow, from the cycles that complete; a cycle ended by a database drop is followed by a
resume cycle at the same clock with the same faults, which serves what the dropped one would have):

* *served* in a cycle: its epoch is in the cycle's window (clock − 2 … clock), it is not final yet, the chain still
  has it, and at least one member of its group is up; the lying host's altered diffs fail the signed check, as
  source or as witness, so one honest member up beside it is enough (plans still take a liar down when no honest
  member of a group is up: the poller would reject its log, and the escrow would wait, which other tests show);
* *fully captured*: served in a cycle after its epoch ended (settled): log, final host stats, ``escrow-final``;
  its rec.*, replay.* and rules.* rows must equal a clean run's;
* *captured open*: served only while its epoch was current: its tx rows must equal a clean run's, and its gap
  must be visible (settlement never read);
* otherwise *lost*: no rows at all, and the loss visible in ``net.failure`` and ``api.ingest_status``;
* except escrows of epochs pruned before the first cycle that reached the chain: the indexer started after them
  (it has no record of having been up), so they are neither captured nor gaps.

Parameters: an ended epoch's parameters are exact (equal to a clean run's) when some completed cycle read them
while the node still had the epoch's last height (:func:`params_exact`), inexact otherwise; a later inexact read
never replaces an exact one.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from indexer.devnet import Devnet, FaultConfig, Scenario, ScenarioConfig
from indexer.devnet.epochviews import end_height

WINDOW = 2  # DevshardPruningThreshold
SHORT_RETAIN = 200  # blocks of state a node keeps in a snapshot-race cycle (less than the 1000 the clock is into
                    # an epoch: even the epoch that just ended has its last height pruned)
# small networks (a poll cycle costs about the same whatever its size, so a plan's cost is its cycle count): two
# epochs of one or two escrows; nine or ten hosts so that groups (6-8 members) differ
SHAPES = {
    "a": ScenarioConfig(seed=31, epochs=2, escrows_per_epoch=2, inferences_per_escrow=8, hosts=10),
    "b": ScenarioConfig(seed=57, epochs=2, escrows_per_epoch=1, inferences_per_escrow=10, hosts=9),
}
_SCENARIOS: dict[str, Scenario] = {}


def scenario(shape: str) -> Scenario:
    """The shape's scenario (immutable data; built once per process)."""
    if shape not in _SCENARIOS:
        _SCENARIOS[shape] = Scenario(SHAPES[shape])
    return _SCENARIOS[shape]


@dataclass(frozen=True)
class Cycle:
    clock: int                                  # devnet epoch during the cycle
    down_hosts: frozenset[str] = frozenset()    # participant addresses
    slow_hosts: frozenset[str] = frozenset()
    down_nodes: frozenset[int] = frozenset()    # chain node indexes
    prune_early: tuple[str, ...] = ()           # escrows the chain forgets before this cycle fetches them
    db_drop: tuple[str, int] | None = None      # ("main", k): terminate the main backend in the k-th transaction;
                                                # ("side", k): the side connection at the k-th prepare
    resume: bool = False                        # the rerun after a dropped cycle
    tick: bool = False                          # settlement race: the epoch ticks right after the settlement search
    retain: int | None = None                   # snapshot race: blocks of state the node keeps (None: an epoch's)

    def describe(self) -> str:
        parts = [f"clock {self.clock}"]
        for name, value in (("down", sorted(self.down_hosts)), ("slow", sorted(self.slow_hosts)),
                            ("nodes down", sorted(self.down_nodes)), ("pruned", list(self.prune_early))):
            if value:
                parts.append(f"{name} {value}")
        if self.db_drop:
            parts.append(f"db drop {self.db_drop}")
        if self.resume:
            parts.append("resume")
        if self.tick:
            parts.append("tick after the settlement search")
        if self.retain is not None:
            parts.append(f"node keeps {self.retain} blocks")
        return ", ".join(parts)


@dataclass
class Plan:
    seed: int
    shape: str
    nodes: int
    faults: FaultConfig
    workers: dict[str, int]
    cycles: list[Cycle] = field(default_factory=list)

    @property
    def scenario(self) -> Scenario:
        return scenario(self.shape)

    def describe(self) -> str:
        f = self.faults
        head = (f"seed {self.seed}: shape {self.shape}, {self.nodes} chain node(s), workers {self.workers}, "
                f"5xx {f.p_5xx} 429 {f.p_429} truncate {f.p_truncate} liar {f.lying_host}")
        return "\n".join([head] + [f"  {c.describe()}" for c in self.cycles])


def draw_plan(seed: int) -> Plan:
    rng = random.Random(seed)
    races = random.Random(f"races:{seed}")
    shape = rng.choice(sorted(SHAPES))
    scn = scenario(shape)
    addresses = [h.address for h in scn.hosts]
    first, last = scn.epochs[0].epoch_index, scn.epochs[-1].epoch_index
    nodes = rng.choice([1, 1, 2, 3])
    liar = rng.choice(addresses) if rng.random() < 0.25 else None
    faults = FaultConfig(seed=seed, p_5xx=rng.choice([0.0, 0.05, 0.15]), p_429=rng.choice([0.0, 0.05]),
                         p_truncate=rng.choice([0.0, 0.05]), retry_after=0, lying_host=liar, slow_seconds=0.02)
    workers = {"escrow_workers": rng.choice([1, 3]), "payload_workers": rng.choice([0, 4]),
               "decode_workers": 2 if rng.random() < 0.08 else 0}
    plan = Plan(seed, shape, nodes, faults, workers)

    clock = first + rng.choice([0, 1])  # the first cycle sees the first epoch open, or already settled
    down_for_good: set[str] = set()
    nodes_for_good: set[int] = set()
    pruned: set[str] = set()
    must_advance = False
    while True:
        if plan.cycles:
            # 3 or more: the poller was down longer than the pruning window
            step = rng.choices([0, 1, 2, 3, 4], [0.06, 0.44, 0.25, 0.15, 0.10])[0]
            clock += max(step, int(must_advance))
        must_advance = False
        down = set(down_for_good)
        if rng.random() < 0.35:
            live = [e for e in scn.escrows.values() if clock - WINDOW <= e.epoch_index <= clock]
            if live and rng.random() < 0.5:
                down |= set(rng.choice(live).slots)  # a host group that never answers
            else:
                down |= set(rng.sample(addresses, rng.randint(1, 3)))
            if rng.random() < 0.3:
                down_for_good |= down
        slow = set(rng.sample(addresses, rng.randint(1, 2))) if rng.random() < 0.2 else set()
        down_nodes = set(nodes_for_good)
        if nodes > 1 and rng.random() < 0.4:
            down_nodes.add(0)  # the first chain URL errors: fail over
            if rng.random() < 0.3:
                nodes_for_good.add(0)
        if rng.random() < 0.05:
            down_nodes = set(range(nodes))  # no chain node answers: the cycle fails, visibly
        prune_early: tuple[str, ...] = ()
        oldest = scn.epoch(clock - WINDOW)
        if oldest and rng.random() < 0.3:
            ids = [e.escrow_id for e in oldest.escrows]
            prune_early = tuple(ids[rng.randrange(len(ids)):])  # the tick came after the first j were fetched
            must_advance = True  # the tick happened: the next cycle sees the next epoch
        pruned |= set(prune_early)
        if liar is not None:
            live = [e for e in scn.escrows.values() if clock - WINDOW <= e.epoch_index <= clock and liar in e.slots]
            if live and rng.random() < 0.3:
                # the liar and one honest member up: no third member is needed, the liar's diffs fail the signed
                # check (these plans stay as drawn, so each seed's other faults are what they were)
                honest = sorted(set(rng.choice(live).slots) - {liar})
                down |= set(honest) - {rng.choice(honest)}
            # a lone liar: take it down then (its log would be rejected, and the escrow wait for a later cycle)
            for esc in scn.escrows.values():
                if liar in esc.slots and not set(esc.slots) - down - {liar}:
                    down.add(liar)
        drop = None
        if rng.random() < 0.2:
            drop = ("main", rng.randint(1, 6)) if rng.random() < 0.75 else ("side", rng.randint(1, 3))
        # the races: a tick needs a cycle that reads the settlements and is not redone (a resume would run a clock
        # late); a short-memory node may come in any cycle
        tick = races.random() < 0.2 and not drop and len(down_nodes) < nodes
        retain = SHORT_RETAIN if races.random() < 0.2 else None
        must_advance = must_advance or tick  # the tick happened: the next cycle sees the next epoch
        cycle = Cycle(clock, frozenset(down), frozenset(slow), frozenset(down_nodes), prune_early, drop, tick=tick,
                      retain=retain)
        plan.cycles.append(cycle)
        if drop:
            plan.cycles.append(Cycle(clock, cycle.down_hosts, cycle.slow_hosts, cycle.down_nodes, (), None,
                                     resume=True, retain=retain))
        if clock >= last + WINDOW + 1 and not must_advance:
            break
    return plan


@dataclass
class Capture:
    full: set[str] = field(default_factory=set)
    open_only: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)
    pruned_early: set[str] = field(default_factory=set)
    # per cycle index: escrows that were due but no member answered; escrows the chain had pruned when fetched
    unserved: dict[int, set[str]] = field(default_factory=dict)
    pruned_in: dict[int, set[str]] = field(default_factory=dict)
    seen_epochs: set[int] = field(default_factory=set)   # epochs some completed cycle had in its window
    exact_params: set[int] = field(default_factory=set)  # epochs whose parameters some completed cycle read exactly
    before_start: set[str] = field(default_factory=set)  # escrows pruned before the first cycle reached the chain


def chain_down(plan: Plan, cycle: Cycle) -> bool:
    return len(cycle.down_nodes) >= plan.nodes


def params_exact(plan: Plan, cycle: Cycle, epoch: int) -> bool:
    """Whether ``cycle`` reads ``epoch``'s parameters as of the epoch: the epoch ended before the cycle started (it
    reads the epoch's last height) and the node still keeps that height when the cycle's snapshots are read, after
    its settlement search (a tick there moves the tip an epoch on)."""
    if not epoch < cycle.clock:
        return False
    at = Devnet(plan.scenario, cycle.clock + cycle.tick)
    retain = plan.scenario.config.blocks_per_epoch if cycle.retain is None else cycle.retain
    return end_height(at, epoch) >= at.latest_height() - retain


def simulate(plan: Plan) -> Capture:
    scn = plan.scenario
    cap = Capture()
    final: set[str] = set()
    opened: set[str] = set()
    pruned: set[str] = set()
    for i, cycle in enumerate(plan.cycles):
        pruned |= set(cycle.prune_early)
        if chain_down(plan, cycle) or cycle.db_drop:
            continue  # nothing this cycle does is relied on (a dropped cycle's work is redone by its resume)
        if cycle.tick:  # the tick prunes the oldest epoch of the window before any escrow is fetched
            old = scn.epoch(cycle.clock - WINDOW)
            pruned |= {e.escrow_id for e in old.escrows} if old else set()
        # the epoch that ended just before the cycle is in its window and not final yet: its snapshot is read
        if scn.epoch(cycle.clock - 1) and params_exact(plan, cycle, cycle.clock - 1):
            cap.exact_params.add(cycle.clock - 1)
        cap.unserved[i], cap.pruned_in[i] = set(), set()
        for esc in scn.escrows.values():
            e, c = esc.epoch_index, cycle.clock
            if not c - WINDOW <= e <= c:
                continue
            cap.seen_epochs.add(e)
            if esc.escrow_id in final:
                continue
            if esc.escrow_id in pruned:
                cap.pruned_in[i].add(esc.escrow_id)
                continue
            up = set(esc.slots) - cycle.down_hosts
            if not up:  # none up (a liar beside an honest member does not block: its log fails the signed check)
                cap.unserved[i].add(esc.escrow_id)
                continue
            if e < c + cycle.tick:  # after a tick the cycle's current epoch is settled on chain when fetched
                final.add(esc.escrow_id)
            else:
                opened.add(esc.escrow_id)
    cap.full = final
    cap.open_only = opened - final
    started = [c.clock for c in plan.cycles if not chain_down(plan, c)]
    cap.before_start = {e.escrow_id for e in scn.escrows.values()
                        if not started or e.epoch_index < started[0] - WINDOW}
    cap.lost = set(scn.escrows) - final - opened - cap.before_start
    cap.pruned_early = pruned
    return cap

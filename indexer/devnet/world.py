"""The devnet's explicit clock: which epoch is current, and what that makes visible.

Time only moves through :meth:`Devnet.advance_epoch` (or ``POST /devnet/advance``), so tests are
deterministic. Rules, per escrow of epoch E at current epoch C:

* E > C: not created yet (unknown to chain, hosts and tx_search);
* E == C: created, unsettled, full diff log on its hosts (the devnet does not drip diffs);
* E < C: settled (during the following epoch), host epoch stats found;
* E < C − 2: pruned (``DevshardPruningThreshold = 2``): chain answers ``found:false`` and hosts drop
  the session; tx_search still finds its events (blocks are not pruned).

:meth:`Devnet.prune_escrow` prunes one escrow ahead of that rule (fault injection: the epoch ticked while a poll
cycle was under way, so an escrow the cycle listed is gone by the time it is fetched).
:attr:`Devnet.tick_after_settlement_search` moves the clock right after the next answer to a search of every
settlement (fault injection: escrows settle after a poll cycle read the settlements, before it fetches them; the
ones of the cycle's current epoch are then settled on chain with no settlement in what the cycle read).
"""

from __future__ import annotations

import threading

from indexer.devnet.scenario import EscrowSim, Scenario

PRUNING_THRESHOLD = 2


class Devnet:
    def __init__(self, scenario: Scenario, current_epoch: int | None = None) -> None:
        self.scenario = scenario
        self.current_epoch = scenario.config.first_epoch if current_epoch is None else current_epoch
        self.lock = threading.RLock()
        self.encoded_logs: dict[tuple[str, bool], tuple[list[int], list[bytes]]] = {}  # see hostviews.diffs_body
        self.encoded_payloads: dict[tuple[str, int], bytes] = {}  # see hostviews.payload_body
        self.pruned_escrows: set[str] = set()  # pruned ahead of the epoch rule (prune_escrow)
        self.tick_after_settlement_search = False  # armed: advance once the next settlement search is answered

    def advance_epoch(self) -> int:
        with self.lock:
            self.current_epoch += 1
            return self.current_epoch

    def settlement_search_answered(self) -> None:
        """The last page of a search of every settlement was just answered: an armed tick happens now, once."""
        with self.lock:
            if self.tick_after_settlement_search:
                self.tick_after_settlement_search = False
                self.current_epoch += 1

    def prune_escrow(self, escrow_id: str) -> None:
        """Chain and hosts forget this escrow now, for good (its events stay in tx_search)."""
        with self.lock:
            self.pruned_escrows.add(str(escrow_id))

    # -- per-escrow visibility --------------------------------------------------------------------
    def created(self, esc: EscrowSim) -> bool:
        return esc.epoch_index <= self.current_epoch

    def settled(self, esc: EscrowSim) -> bool:
        return esc.epoch_index < self.current_epoch

    def pruned_epoch(self, epoch_index: int) -> bool:
        return epoch_index < self.current_epoch - PRUNING_THRESHOLD

    def live(self, esc: EscrowSim) -> bool:
        """Known to chain state and to its hosts."""
        return (self.created(esc) and not self.pruned_epoch(esc.epoch_index)
                and esc.escrow_id not in self.pruned_escrows)

    def escrow(self, escrow_id: str) -> EscrowSim | None:
        return self.scenario.escrows.get(str(escrow_id))

    # -- chain clock --------------------------------------------------------------------------------
    def latest_height(self) -> int:
        # far enough into the epoch that its creations and the previous epoch's settlements are in
        return self.scenario.epoch_start(self.current_epoch)[0] + 1000

    def now(self) -> int:
        start_height, start_time = self.scenario.epoch_start(self.current_epoch)
        return start_time + (self.latest_height() - start_height) * self.scenario.config.seconds_per_block

    def settle_height(self, esc: EscrowSim) -> int:
        """The block of the escrow's settlement: in its epoch's last blocks, in escrow order. The chain adds a
        settlement's host stats to the epoch's counters only while the escrow's epoch is the effective one
        (MsgSettleDevshardEscrow treatAsCurrentEpochSettle), so users settle before the epoch ends; the clock shows
        the settlement once it has moved past the epoch."""
        escrows = self.scenario.epoch(esc.epoch_index).escrows
        index = next(i for i, e in enumerate(escrows) if e is esc)
        return self.scenario.epoch_start(esc.epoch_index + 1)[0] - 1 - 2 * (len(escrows) - index)

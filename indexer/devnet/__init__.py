"""A simulated Gonka devshard network on loopback (chain REST, CometBFT RPC subset, devshard hosts).

Entry points: :class:`Scenario` / :class:`ScenarioConfig` (seeded data and ground truth),
:class:`Devnet` (the epoch clock), :class:`DevnetServer` / :class:`FaultConfig` (HTTP).
"""

from indexer.devnet.scenario import EscrowSim, EpochSim, Scenario, ScenarioConfig
from indexer.devnet.server import DevnetServer, FaultConfig
from indexer.devnet.world import Devnet

__all__ = ["Devnet", "DevnetServer", "EpochSim", "EscrowSim", "FaultConfig", "Scenario", "ScenarioConfig"]

"""A simulated Gonka devshard network on loopback (chain REST, CometBFT RPC subset, devshard hosts).

Entry points: :class:`Scenario` / :class:`ScenarioConfig` (seeded data and ground truth),
:class:`Devnet` (the epoch clock), :class:`DevnetServer` / :class:`FaultConfig` (HTTP).
The names are imported on first use, so `indexer --help` and the CLI's parser do not pay for the simulator.
"""
from importlib import import_module

_HOMES = {"EscrowSim": "scenario", "EpochSim": "scenario", "Scenario": "scenario", "ScenarioConfig": "scenario",
          "DevnetServer": "server", "FaultConfig": "server", "Devnet": "world"}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(import_module(f"indexer.devnet.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'indexer.devnet' has no attribute {name!r}")

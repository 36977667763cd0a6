"""``python -m indexer.devnet``: serve the simulated network until interrupted.

``indexer devnet`` (indexer.cli.commands.cmd_devnet) reuses :func:`add_arguments` and :func:`serve`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Callable

from indexer.devnet.operators import write_operator_key
from indexer.devnet.options import SCENARIO_OPTIONS, add_arguments, is_loopback
from indexer.devnet.scenario import Scenario, ScenarioConfig
from indexer.devnet.server import DevnetServer, FaultConfig

__all__ = ["add_arguments", "is_loopback", "main", "serve", "server_from_args"]


def server_from_args(args: argparse.Namespace) -> DevnetServer:
    given = {name: getattr(args, name) for name in SCENARIO_OPTIONS if getattr(args, name, None) is not None}
    config = ScenarioConfig(**given)  # options left out keep the scenario's defaults
    faults = FaultConfig(seed=config.seed, p_5xx=args.p_5xx, p_429=args.p_429, p_delay=args.p_delay,
                         delay_seconds=args.delay_seconds, p_truncate=args.p_truncate, lying_host=args.lying_host,
                         lying_kind=getattr(args, "lying_kind", "altered"))
    return DevnetServer(Scenario(config), faults=faults, b64_events=args.b64_events,
                        escrow_max_model_len=args.escrow_max_model_len, host=args.bind, port=args.port,
                        warm=getattr(args, "warm", False), payload_auth=getattr(args, "payload_auth", False))


def write_operator_key_from_args(args: argparse.Namespace, server: DevnetServer) -> str | None:
    """Write ``--operator``'s devnet key to ``--operator-key-file``; the operator's address, or None."""
    path = getattr(args, "operator_key_file", None)
    if not path:
        return None
    address = getattr(args, "operator", None) or server.scenario.hosts[0].address
    if server.app.accounts.granter_of_warm(address) is None and address not in server.app.accounts.participants:
        raise SystemExit(f"--operator {address}: not a devnet participant or warm key")
    write_operator_key(path, server.scenario.keys, address)
    return address


def serve(args: argparse.Namespace, on_ready: Callable[[DevnetServer], None] | None = None) -> None:
    """Start the devnet from parsed arguments, print its URLs as one JSON line, and serve until SIGTERM or
    Ctrl-C."""
    server = server_from_args(args)
    operator = write_operator_key_from_args(args, server)
    server.start()
    ready = {"chain_rest_url": server.chain_rest_url, "rpc_url": server.rpc_url,
             "advance": f"POST {server.url}/devnet/advance", "state": f"{server.url}/devnet/state"}
    if operator is not None:
        ready["operator_address"] = operator
    print(json.dumps(ready))
    sys.stdout.flush()
    if on_ready is not None:
        on_ready(server)
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *a: stopping.set())
    try:
        while not stopping.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m indexer.devnet", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if not is_loopback(args.bind):
        parser.error("the devnet only binds to loopback")
    serve(args)
    return 0

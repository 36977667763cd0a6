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

from indexer.devnet.scenario import Scenario, ScenarioConfig
from indexer.devnet.server import DevnetServer, FaultConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = ScenarioConfig()
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--epochs", type=int, default=d.epochs)
    parser.add_argument("--escrows-per-epoch", type=int, default=d.escrows_per_epoch)
    parser.add_argument("--inferences-per-escrow", type=int, default=d.inferences_per_escrow)
    parser.add_argument("--hosts", type=int, default=d.hosts)
    parser.add_argument("--bind", default="127.0.0.1", help="loopback only")
    parser.add_argument("--port", type=int, default=0, help="0 = chosen by the OS")
    parser.add_argument("--b64-events", action="store_true", help="base64 event attributes (old CometBFT)")
    parser.add_argument("--escrow-max-model-len", choices=("string", "number"), default=None)
    parser.add_argument("--p-5xx", type=float, default=0.0)
    parser.add_argument("--p-429", type=float, default=0.0)
    parser.add_argument("--p-delay", type=float, default=0.0)
    parser.add_argument("--delay-seconds", type=float, default=1.0)
    parser.add_argument("--p-truncate", type=float, default=0.0)
    parser.add_argument("--lying-host", default=None, help="participant address serving a diverging diff log")
    parser.add_argument("--no-warm", dest="warm", action="store_false",
                        help="encode each diff log on its first request instead of before serving")


def server_from_args(args: argparse.Namespace) -> DevnetServer:
    config = ScenarioConfig(seed=args.seed, epochs=args.epochs, escrows_per_epoch=args.escrows_per_epoch,
                            inferences_per_escrow=args.inferences_per_escrow, hosts=args.hosts)
    faults = FaultConfig(seed=args.seed, p_5xx=args.p_5xx, p_429=args.p_429, p_delay=args.p_delay,
                         delay_seconds=args.delay_seconds, p_truncate=args.p_truncate, lying_host=args.lying_host)
    return DevnetServer(Scenario(config), faults=faults, b64_events=args.b64_events,
                        escrow_max_model_len=args.escrow_max_model_len, host=args.bind, port=args.port,
                        warm=getattr(args, "warm", False))


def is_loopback(host: str) -> bool:
    return host.startswith("127.") or host in ("localhost", "::1")


def serve(args: argparse.Namespace, on_ready: Callable[[DevnetServer], None] | None = None) -> None:
    """Start the devnet from parsed arguments, print its URLs as one JSON line, and serve until SIGTERM or
    Ctrl-C."""
    server = server_from_args(args).start()
    print(json.dumps({"chain_rest_url": server.chain_rest_url, "rpc_url": server.rpc_url,
                      "advance": f"POST {server.url}/devnet/advance", "state": f"{server.url}/devnet/state"}))
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

"""``python -m indexer.devnet``: serve the simulated network until interrupted.

``indexer devnet`` (indexer.poller.run.cmd_devnet) reuses :func:`add_arguments` and :func:`serve`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Callable

from indexer.devnet.operators import write_operator_key
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
    parser.add_argument("--payload-auth", action="store_true",
                        help="the payload route authenticates like real hosts (signed group-member requests only)")
    parser.add_argument("--operator", default=None, metavar="ADDRESS",
                        help="participant (or its '<address>-warm' key) whose devnet key --operator-key-file "
                             "receives; default: the first host")
    parser.add_argument("--operator-key-file", default=None, metavar="PATH",
                        help="write the operator's devnet private key there (mode 0600, must not exist) for "
                             "GONKA_OPERATOR_KEY_FILE")


def server_from_args(args: argparse.Namespace) -> DevnetServer:
    config = ScenarioConfig(seed=args.seed, epochs=args.epochs, escrows_per_epoch=args.escrows_per_epoch,
                            inferences_per_escrow=args.inferences_per_escrow, hosts=args.hosts)
    faults = FaultConfig(seed=args.seed, p_5xx=args.p_5xx, p_429=args.p_429, p_delay=args.p_delay,
                         delay_seconds=args.delay_seconds, p_truncate=args.p_truncate, lying_host=args.lying_host)
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
    write_operator_key(path, server.scenario.config.seed, address)
    return address


def is_loopback(host: str) -> bool:
    return host.startswith("127.") or host in ("localhost", "::1")


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

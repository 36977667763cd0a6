"""The devnet's command-line options, shared by ``indexer devnet`` and ``python -m indexer.devnet``. Kept apart from
the simulator so that building the CLI parser does not import it; scenario options default to None and then take
:class:`indexer.devnet.scenario.ScenarioConfig`'s defaults."""
from __future__ import annotations

import argparse

SCENARIO_OPTIONS = ("seed", "epochs", "escrows_per_epoch", "inferences_per_escrow", "hosts")


def is_loopback(host: str) -> bool:
    return host.startswith("127.") or host in ("localhost", "::1")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, help="scenario seed: equal seeds serve byte-identical networks")
    parser.add_argument("--epochs", type=int, help="epochs in the scenario")
    parser.add_argument("--escrows-per-epoch", type=int, help="escrows created in each epoch")
    parser.add_argument("--inferences-per-escrow", type=int, help="inferences in each escrow's log")
    parser.add_argument("--hosts", type=int, help="participant hosts (some with a raised local --max-model-len)")
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on (loopback only; default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default 0: chosen by the OS)")
    parser.add_argument("--b64-events", action="store_true",
                        help="base64-encode tx_search event attributes, as CometBFT before 0.38 does")
    parser.add_argument("--escrow-max-model-len", choices=("string", "number"), default=None,
                        help="also publish DevshardEscrow.max_model_len (upstream #1763), as a string or a number")
    parser.add_argument("--p-5xx", type=float, default=0.0, help="probability a request answers 500-503 (default 0)")
    parser.add_argument("--p-429", type=float, default=0.0,
                        help="probability a request answers 429 with Retry-After (default 0)")
    parser.add_argument("--p-delay", type=float, default=0.0, help="probability a response is delayed (default 0)")
    parser.add_argument("--delay-seconds", type=float, default=1.0, help="length of such a delay (default 1.0)")
    parser.add_argument("--p-truncate", type=float, default=0.0,
                        help="probability a response body is cut short (default 0)")
    parser.add_argument("--lying-host", default=None, help="participant address serving a diverging diff log")
    parser.add_argument("--lying-kind", choices=("altered", "fork"), default="altered",
                        help="altered: txs changed under the user's signatures (the signature check fails); fork: a "
                             "history the user signed as well (only the settlement tells it apart)")
    parser.add_argument("--no-warm", dest="warm", action="store_false",
                        help="encode each diff log and payload on its first request instead of before serving")
    parser.add_argument("--payload-auth", action="store_true",
                        help="the payload route authenticates like real hosts (signed group-member requests only)")
    parser.add_argument("--operator", default=None, metavar="ADDRESS",
                        help="participant (or its warm key's address) whose devnet key --operator-key-file "
                             "receives; default: the first host")
    parser.add_argument("--operator-key-file", default=None, metavar="PATH",
                        help="write the operator's devnet private key there (mode 0600, must not exist) for "
                             "GONKA_OPERATOR_KEY_FILE")

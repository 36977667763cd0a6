"""The `indexer` argument parser: every command and option, each with its help line."""
from __future__ import annotations

import argparse


def parse_epochs(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    lo, sep, hi = text.partition("..")
    try:
        a, b = int(lo), int(hi if sep else lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--epochs wants A..B or N, got {text!r}") from None
    if a > b:
        raise argparse.ArgumentTypeError(f"--epochs range is empty: {text!r}")
    return a, b


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


EPOCHS_HELP = "epoch range A..B (or one epoch N)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="indexer", description="Gonka devshard chain-state indexer")
    p.add_argument("--database-url", help="PostgreSQL URL (default: $DATABASE_URL, else the embedded PostgreSQL)")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress and debug details to stderr")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("migrate", help="bring the schema to head, including the api views",
                   description="Alembic to head, then the replaceable views and functions, then the reader role.")

    ing = sub.add_parser("ingest", help="load normalized NDJSON (plain, .gz, - for stdin), replay, re-evaluate")
    ing.add_argument("files", nargs="+", metavar="FILE", help="NDJSON file(s); .gz is decompressed; - reads stdin")
    ing.add_argument("--batch-lines", type=positive_int, default=50_000,
                     help="lines per committed batch (default 50000; a batch is also cut at 8 MB)")
    ing.add_argument("--no-progress", action="store_true", help="no progress bar, even on a terminal")
    ing.add_argument("--allow-quarantine", action="store_true",
                     help="exit 0 even when lines were quarantined (default: exit 2)")

    rep = sub.add_parser("replay", help="replay escrows (dirty ones by default)")
    rep.add_argument("--all", action="store_true", help="replay every escrow, not only the dirty ones")

    ru = sub.add_parser("rules", help="re-evaluate the rules stage (dirty epochs; --epochs forces a range)")
    ru.add_argument("--epochs", type=parse_epochs, help=EPOCHS_HELP + " to re-evaluate whole, dirty or not")

    ex = sub.add_parser("export", help="write stored records as normalized NDJSON")
    ex.add_argument("--epochs", type=parse_epochs, help=EPOCHS_HELP + " to export (default: all)")
    ex.add_argument("file", metavar="FILE", help="output file (.gz compresses; - writes stdout)")

    db = sub.add_parser("db", help="embedded database: url | stop")
    db.add_argument("action", choices=["url", "stop"],
                    help="url: print the URL (starting the embedded server if needed); stop: stop it")

    rp = sub.add_parser("report", help="findings per epoch and per host; --html writes a page with charts")
    rp.add_argument("--epochs", type=parse_epochs, help=EPOCHS_HELP + " to report (default: all)")
    rp.add_argument("--html", metavar="FILE", help="write a self-contained HTML page with charts to FILE")
    rp.add_argument("--restitution", action="store_true",
                    help="write per epoch the restitution report restitution-<epoch>.md and .csv (hosts whose "
                         "epoch outcome the disputable penalties changed, amounts, evidence, parameters in force)")
    rp.add_argument("--out", metavar="DIR", default=".",
                    help="directory for the --restitution files (default: the current directory)")

    demo = sub.add_parser("demo", help="run the main job on embedded defaults and print the findings")
    demo.add_argument("--sample", metavar="FILE", help="ingest this normalized NDJSON file instead of polling the devnet")
    demo.add_argument("--epochs", type=positive_int, default=4, help="devnet epochs to poll (default 4)")
    demo.add_argument("--seed", type=int, default=2078, help="devnet scenario seed (default 2078)")

    run = sub.add_parser("run", help="the poller: ingest from the Gonka endpoints (--once: one cycle)")
    run.add_argument("--once", action="store_true", help="run one full cycle and exit")
    run.add_argument("--interval", type=positive_float, default=30.0, help="seconds between cycles (default 30)")
    run.add_argument("--gonka-chain-rest-url", "--gonka_chain_rest_url", metavar="URL[,URL]",
                     help="chain REST URL(s), comma-separated, failover in order ($GONKA_CHAIN_REST_URL)")
    run.add_argument("--gonka-rpc-url", "--gonka_rpc_url", metavar="URL[,URL]",
                     help="CometBFT RPC URL(s), comma-separated ($GONKA_RPC_URL)")
    run.add_argument("--gonka-operator-address", "--gonka_operator_address", metavar="ADDRESS",
                     help="operator mode: address that signs payload requests ($GONKA_OPERATOR_ADDRESS)")
    run.add_argument("--gonka-operator-key-file", "--gonka_operator_key_file", metavar="FILE",
                     help="operator mode: its key file, owner-only, never logged ($GONKA_OPERATOR_KEY_FILE)")
    run.add_argument("--gonka-operator-member", "--gonka_operator_member", metavar="ADDRESS",
                     help="operator mode: the group member a warm key acts for ($GONKA_OPERATOR_MEMBER)")

    from indexer.devnet.options import add_arguments as devnet_arguments

    devnet_arguments(sub.add_parser("devnet", help="serve a simulated Gonka network on loopback until Ctrl-C"))
    for command in sub.choices.values():  # interface.md §1: every command takes --database-url, before or after
        command.add_argument("--database-url", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p

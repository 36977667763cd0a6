"""The `indexer` command line: thin wrappers over the stages. Exit codes: 0 ok, 1 runtime failure, 2 bad input."""
from __future__ import annotations

import argparse
import logging
import sys

from rich.console import Console

console = Console(stderr=True)
EXIT_OK, EXIT_RUNTIME, EXIT_INPUT = 0, 1, 2


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="indexer", description="Gonka devshard chain-state indexer")
    p.add_argument("--database-url", help="PostgreSQL URL (default: $DATABASE_URL, else embedded PostgreSQL)")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="bring the schema to head, including the api views")
    ing = sub.add_parser("ingest", help="load normalized NDJSON (plain, .gz, - for stdin), replay, re-evaluate")
    ing.add_argument("files", nargs="+")
    ing.add_argument("--batch-lines", type=int, default=50_000)
    ing.add_argument("--no-progress", action="store_true")
    ing.add_argument("--allow-quarantine", action="store_true",
                     help="exit 0 even when lines were quarantined (default: exit 2)")
    rep = sub.add_parser("replay", help="replay escrows (dirty ones by default)")
    rep.add_argument("--all", action="store_true", help="replay every escrow")
    ru = sub.add_parser("rules", help="re-evaluate the rules stage (dirty epochs; --epochs forces a range)")
    ru.add_argument("--epochs", type=parse_epochs)
    ex = sub.add_parser("export", help="write stored records as normalized NDJSON")
    ex.add_argument("--epochs", type=parse_epochs)
    ex.add_argument("file")
    db = sub.add_parser("db", help="embedded database: url | stop")
    db.add_argument("action", choices=["url", "stop"])
    rp = sub.add_parser("report", help="findings per epoch and per host; --html writes a page with charts")
    rp.add_argument("--epochs", type=parse_epochs)
    rp.add_argument("--html", metavar="FILE")
    demo = sub.add_parser("demo", help="run the main job on embedded defaults and print the findings")
    demo.add_argument("--sample", help="ingest this normalized NDJSON file instead of polling the devnet")
    demo.add_argument("--epochs", type=int, default=4, help="devnet epochs to poll (default 4)")
    demo.add_argument("--seed", type=int, default=2078, help="devnet scenario seed")
    run = sub.add_parser("run", help="the poller: ingest from the Gonka endpoints (--once: one cycle)")
    run.add_argument("--once", action="store_true", help="run one full cycle and exit")
    run.add_argument("--interval", type=float, default=30.0, help="seconds between cycles (default 30)")
    run.add_argument("--gonka-chain-rest-url", "--gonka_chain_rest_url",
                     help="chain REST URL(s), comma-separated, failover in order ($GONKA_CHAIN_REST_URL)")
    run.add_argument("--gonka-rpc-url", "--gonka_rpc_url", help="CometBFT RPC URL(s), comma-separated ($GONKA_RPC_URL)")
    from indexer.devnet.run import add_arguments as devnet_arguments

    devnet_arguments(sub.add_parser("devnet", help="serve a simulated Gonka network on loopback until Ctrl-C"))
    for command in sub.choices.values():  # interface.md §1: every command takes --database-url, before or after
        command.add_argument("--database-url", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    from indexer import commands
    from indexer.sources.ndjson import InputError

    try:
        return getattr(commands, f"cmd_{args.command}")(args)
    except InputError as exc:
        console.print(f"[red]error:[/] {exc}")
        return EXIT_INPUT
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]")
        return EXIT_RUNTIME
    except Exception as exc:  # noqa: BLE001 - the CLI reports, logs carry the trace
        logging.getLogger("indexer").debug("failure", exc_info=True)
        console.print(f"[red]error:[/] {type(exc).__name__}: {exc}")
        return EXIT_RUNTIME


if __name__ == "__main__":
    sys.exit(main())

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


def coins(text: str) -> str:
    """A cosmos coin amount: an integer followed by a denomination (50000000000ngonka)."""
    import re

    if not re.fullmatch(r"[0-9]+[a-z][a-z0-9/]{2,127}", text or ""):
        raise argparse.ArgumentTypeError(f"wants an amount and a denomination like 50000000000ngonka, got {text!r}")
    return text


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def payload_attempts(text: str) -> int:
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2 (the escrow's fetch is the first attempt), got {value}")
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
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str):
    """90s, 30m, 2h, 7d or plain seconds, as a timedelta."""
    from datetime import timedelta

    number, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a duration like 90s, 30m, 2h or 7d, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return timedelta(seconds=value * _UNITS[unit])


def add_alert_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--webhook", action="append", default=[], metavar="URL",
                   help="alert webhook (repeatable; also $INDEXER_ALERT_WEBHOOKS, comma-separated)")
    p.add_argument("--slack-webhook", action="append", default=[], metavar="URL",
                   help="Slack incoming-webhook URL (repeatable; also $INDEXER_ALERT_SLACK_WEBHOOKS)")
    p.add_argument("--telegram-chat", action="append", default=[], metavar="CHAT_ID",
                   help="Telegram chat id (repeatable; also $INDEXER_ALERT_TELEGRAM_CHATS; the bot token only from "
                        "$INDEXER_ALERT_TELEGRAM_TOKEN)")
    p.add_argument("--alerts-interval", type=positive_float, default=60.0, metavar="SECONDS",
                   help="seconds between alert evaluations (default 60)")
    p.add_argument("--resolve-after", type=positive_int, default=3, metavar="N",
                   help="an alert resolves after N consecutive evaluations without it (default 3)")
    p.add_argument("--cooldown", type=parse_duration, default=parse_duration("1h"), metavar="DURATION",
                   help="at least this long between two notifications of one alert key (default 1h)")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR",
                   help="more alert rules: *.sql files, one rule each (repeatable; same name replaces a packaged one)")


def package_version() -> str:
    """The installed distribution's version; the package's own ``__version__`` when run from a source tree that
    was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("devshard-indexer")
    except PackageNotFoundError:
        from indexer import __version__

        return __version__


class _VersionAction(argparse.Action):
    """``--version``: the version is looked up only when asked for (reading package metadata costs every command
    a few milliseconds otherwise)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"indexer {package_version()}")  # stdout, as argparse's own version action
        parser.exit()


# the health rule is indexer.observe.health's; this is its user-facing statement
STATUS_HELP = """\
One screen: the database in use (password redacted), whether it is healthy and why not, the last poll cycle and its
outcome, the sources (cursor and lag; per class, then the chain, the epochs not final yet and every lagging or
erroring source), the epochs per state and the alerts firing.

Healthy means all of:
  - the schema exists (`indexer migrate` creates it);
  - no source lags more than --ready-max-lag seconds (the rule of `indexer run`'s /ready);
  - the last poll cycle did not fail (a failed cycle's error stays on the `chain` source until one succeeds);
  - no alert at --fail-on severity or above is firing, unless silenced.
An empty, migrated database is healthy (nothing is late yet).

Exit status: 0 healthy; 1 not healthy (the reasons are listed); 2 bad usage or the database cannot be reached."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="indexer", description="Gonka devshard chain-state indexer")
    p.add_argument("--version", action=_VersionAction, help="print the package version and exit")
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

    ar = sub.add_parser("archive", help="write old epochs to compressed NDJSON, then drop them from the database",
                        description="Every record of the epochs before --before goes to DIR/epoch-<E>.ndjson.gz "
                                    "(what `ingest` reads back to the same rows) with DIR/manifest.json (counts, "
                                    "sha256); only after the files are on disk are the epochs' partitions dropped, "
                                    "one transaction per epoch. Rerun after a failure to finish the job.")
    ar.add_argument("--before", type=int, required=True, metavar="EPOCH",
                    help="archive every epoch below this one (EPOCH itself stays)")
    ar.add_argument("--to", required=True, metavar="DIR", help="directory for the files and the manifest")
    ar.add_argument("--force", action="store_true",
                    help="archive epochs that are not final in net.epoch_state (their records may still change)")

    ev = sub.add_parser("evidence", help="write an escrow's evidence bundle (python -m indexer.verify checks it)",
                        description="A self-contained devshard-evidence/1 bundle: the escrow's signed diffs, its "
                                    "settlement transaction, the group, creator, amount and session config, and "
                                    "each disputable penalty's derivation (rule, numbers, governance limit and its "
                                    "source). Anyone can check it with `python -m indexer.verify FILE`.")
    ev.add_argument("escrow", metavar="ESCROW", help="the escrow id")
    ev.add_argument("inference", metavar="INFERENCE", type=int, nargs="?",
                    help="only this inference's penalties (default: every disputable penalty of the escrow)")
    ev.add_argument("--out", required=True, metavar="FILE", help="where to write the bundle (JSON)")

    db = sub.add_parser("db", help="embedded database: url | stop")
    db.add_argument("action", choices=["url", "stop"],
                    help="url: print the URL (starting the embedded server if needed); stop: stop it")
    db.add_argument("--reader", action="store_true",
                    help="url: the embedded server's URL for the read-only role indexer_reader (schema api only)")

    rp = sub.add_parser("report", help="findings per epoch and per host; --html writes a page with charts")
    rp.add_argument("--epochs", type=parse_epochs, help=EPOCHS_HELP + " to report (default: all)")
    rp.add_argument("--html", metavar="FILE", help="write a self-contained HTML page with charts to FILE")
    rp.add_argument("--restitution", action="store_true",
                    help="write per epoch the restitution report restitution-<epoch>.md and .csv (hosts whose "
                         "epoch outcome the disputable penalties changed, amounts, evidence, parameters in force)")
    rp.add_argument("--out", metavar="DIR", default=".",
                    help="directory for the --restitution files (default: the current directory)")
    rp.add_argument("--proposal", metavar="FILE",
                    help="with --restitution: also write the governance proposal (MsgSubmitProposal JSON with one "
                         "MsgBatchTransferWithVesting) paying the amounts to restitute")
    rp.add_argument("--deposit", type=coins, metavar="COINS",
                    help="the proposal's deposit, e.g. 50000000000ngonka (required with --proposal: the chain's "
                         "governance min_deposit)")
    rp.add_argument("--vesting-epochs", type=positive_int, default=150,
                    help="the proposal's vesting_epochs (default 150)")

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

    run.add_argument("--metrics-addr", metavar="HOST:PORT|off",
                     help="serve /metrics, /health, /ready here ($INDEXER_METRICS_ADDR, default 127.0.0.1:9464; "
                          "off: none; an address in use stops the start with exit 2)")
    run.add_argument("--ready-max-lag", type=positive_float, metavar="SECONDS",
                     help="/ready answers 503 when a source lags more than this ($INDEXER_READY_MAX_LAG, default 900)")
    run.add_argument("--lease-seconds", type=positive_float, metavar="SECONDS",
                     help="several pollers on one database split the work through leases of this length, renewed "
                          "while working; a killed poller's work is taken over once they expire "
                          "($INDEXER_LEASE_SECONDS, default 60)")
    run.add_argument("--allow-private-hosts", action="store_true",
                     help="let participants' inference_url point at loopback, private or link-local addresses "
                          "(a devnet or a private network; off by default: such a URL is refused and recorded)")
    run.add_argument("--archive-days", type=positive_float, default=14.0, metavar="DAYS",
                     help="days net.raw_response keeps the archived answers and net.failure the failure rows; "
                          "older ones are pruned at the end of each cycle (default 14)")
    run.add_argument("--payload-attempts", type=payload_attempts, default=16, metavar="N",
                     help="a 0/0 Finish's response payload no group member served is asked again each cycle and "
                          "given up after N attempts in all (default 16: about two days with the default backoff)")
    run.add_argument("--payload-backoff", type=positive_float, default=60.0, metavar="SECONDS",
                     help="wait before the third attempt at a missing payload, doubled after each further one up to "
                          "6 hours (the second attempt is the next cycle; default 60)")
    run.add_argument("--no-alerts", action="store_true", help="do not run the alert jobs in this process")
    add_alert_arguments(run)

    al = sub.add_parser("alerts", help="evaluate the alert rules and deliver notifications (--once: one pass)",
                        description="Alert rules (SQL files) -> state per alert key -> outbox -> webhook, Slack, "
                                    "Telegram. --silence adds a silence and exits.")
    al.add_argument("--once", action="store_true", help="evaluate once, deliver what is due, and exit")
    add_alert_arguments(al)
    al.add_argument("--silence", metavar="KEY_OR_RULE",
                    help="silence one alert key (contains ':') or a whole rule for --for, then exit")
    al.add_argument("--for", dest="silence_for", type=parse_duration, default=parse_duration("1h"), metavar="DURATION",
                    help="how long --silence lasts: 90s, 30m, 2h, 7d (default 1h)")
    al.add_argument("--reason", default="", help="why (stored with the silence)")
    al.add_argument("--silences", action="store_true", help="list the silences in force, then exit")
    al.add_argument("--unsilence", metavar="KEY_OR_RULE",
                    help="end the silences of one alert key or rule now, then exit")

    st = sub.add_parser("status", help="one screen: sources, last cycle, epochs, alerts; exit 1 when not healthy",
                        description=STATUS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    st.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the screen")
    st.add_argument("--ready-max-lag", type=positive_float, metavar="SECONDS",
                    help="a source lagging more than this is not healthy ($INDEXER_READY_MAX_LAG, default 900)")
    st.add_argument("--fail-on", choices=["info", "warning", "critical", "none"], default="warning",
                    help="firing alerts of this severity or above make the status not healthy (default warning; "
                         "none: alerts never do)")

    from indexer.devnet.options import add_arguments as devnet_arguments

    devnet_arguments(sub.add_parser("devnet", help="serve a simulated Gonka network on loopback until Ctrl-C"))
    for command in sub.choices.values():  # interface.md §1: every command takes --database-url, before or after
        command.add_argument("--database-url", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p

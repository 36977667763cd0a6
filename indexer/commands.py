"""Command implementations behind the CLI: each opens the database, runs a stage, prints a summary."""
from __future__ import annotations

import psycopg
from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                           TransferSpeedColumn)
from rich.table import Table

from indexer.cli import EXIT_INPUT, EXIT_OK, console
from indexer.db import migrate
from indexer.db.url import redact, resolve_database_url


def database_url(args) -> str:
    return resolve_database_url(args.database_url)


def ensure_schema(url: str) -> None:
    if migrate.current_revision(url) not in migrate.heads():
        migrate.upgrade(url)


def process_changes(url: str) -> dict:
    """Everything downstream of new records: replay dirty escrows, then the rules stage on dirty epochs."""
    from indexer.replay.run import REPLAY_WORKERS, replay_dirty
    from indexer.rules.run import run_rules

    with psycopg.connect(url) as conn:
        replayed = replay_dirty(conn, url=url, workers=REPLAY_WORKERS)
        rules = run_rules(conn)
    return {"replay": replayed, "rules": rules}


def cmd_migrate(args) -> int:
    url = database_url(args)
    migrate.upgrade(url)
    console.print(f"schema at {', '.join(migrate.heads())} on {redact(url)}")
    return EXIT_OK


def cmd_db(args) -> int:
    from indexer.db.embedded import EmbeddedCluster

    if args.action == "url":
        print(database_url(args))
    else:
        stopped = EmbeddedCluster().stop()
        console.print("embedded PostgreSQL stopped" if stopped else "embedded PostgreSQL was not running")
    return EXIT_OK


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}", style="cyan"), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=False)


def cmd_ingest(args) -> int:
    from indexer.load.ingest import ingest_paths

    url = database_url(args)
    ensure_schema(url)
    if args.no_progress or not console.is_terminal:
        summary = ingest_paths(url, args.files, batch_lines=args.batch_lines)
    else:
        with _progress() as progress:
            summary = ingest_paths(url, args.files, batch_lines=args.batch_lines, progress=progress)
    downstream = process_changes(url)
    print_ingest_summary(summary, downstream)
    if summary.quarantined and not args.allow_quarantine:
        console.print(f"[yellow]{summary.quarantined} line(s) quarantined; see api.quarantine[/]")
        return EXIT_INPUT
    return EXIT_OK


def print_ingest_summary(summary, downstream) -> None:
    t = Table(title="ingest summary", show_header=False)
    replay = downstream["replay"]
    rows = [("files", summary.files), ("lines", summary.lines), ("loaded (new)", summary.loaded),
            ("amended", summary.amended), ("unchanged", summary.unchanged), ("quarantined", summary.quarantined),
            ("resumed past (already committed)", summary.skipped_resumed), ("escrows touched", replay.escrows),
            ("txs replayed", replay.txs), ("txs rejected by the state machine", replay.rejected),
            ("seconds (load / replay / rules)", f"{summary.seconds:.2f} / {replay.seconds:.2f} / "
                                                f"{downstream['rules'].seconds:.2f}"),
            ("epochs re-evaluated", downstream["rules"].epochs)]
    for name, value in rows:
        t.add_row(name, str(value))
    console.print(t)


def cmd_replay(args) -> int:
    from indexer.replay.run import mark_all_dirty

    url = database_url(args)
    ensure_schema(url)
    if args.all:
        with psycopg.connect(url) as conn:
            mark_all_dirty(conn)
    downstream = process_changes(url)
    r = downstream["replay"]
    console.print(f"replayed {r.escrows} escrows, {r.txs} txs ({r.rejected} rejected) in {r.seconds:.2f}s")
    return EXIT_OK


def cmd_rules(args) -> int:
    from indexer.rules.run import run_rules

    url = database_url(args)
    ensure_schema(url)
    with psycopg.connect(url) as conn:
        summary = run_rules(conn, args.epochs)
    console.print(f"rules: {summary.epochs} epoch(s) evaluated, {summary.parsed} payload(s) parsed, "
                  f"{summary.disputable} disputable penalt{'y' if summary.disputable == 1 else 'ies'} "
                  f"in {summary.seconds:.2f}s")
    return EXIT_OK


def cmd_export(args) -> int:
    from indexer.load.export import export_records

    url = database_url(args)
    ensure_schema(url)
    counts = export_records(url, args.file, args.epochs)
    console.print("exported " + ", ".join(f"{k}={v}" for k, v in counts.items() if v))
    return EXIT_OK


def cmd_demo(args) -> int:
    from indexer.demo import run_demo

    return run_demo(args)


def cmd_report(args) -> int:
    from indexer.report import collect, print_report, render_html

    url = database_url(args)
    ensure_schema(url)
    findings = collect(url, args.epochs)
    if args.html:
        with open(args.html, "w", encoding="utf-8") as fh:
            fh.write(render_html(findings))
        console.print(f"wrote {args.html}")
    else:
        from rich.console import Console

        print_report(findings, Console())
    return EXIT_OK


def cmd_run(args) -> int:
    from indexer.poller.run import cmd_run as run

    return run(args)


def cmd_devnet(args) -> int:
    from indexer.poller.run import cmd_devnet as devnet

    return devnet(args)

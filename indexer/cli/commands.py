"""Command bodies: resolve settings and the database, call one stage, print its summary, return an exit code.
No stage logic lives here (that is in load/, replay/, rules/, pipeline, poller/); only arguments and printing."""
from __future__ import annotations

import argparse

from indexer.cli.output import EXIT_INPUT, EXIT_OK, EXIT_RUNTIME, console, error, one_line, say, warn
from indexer.db.migrate import ensure_schema
from indexer.db.url import embedded_finder, redact, resolve_database_url
from indexer.settings import Settings


def database_url(args: argparse.Namespace, settings: Settings) -> str:
    return resolve_database_url(args.database_url, settings)


def ready_database(args: argparse.Namespace, settings: Settings) -> str:
    """The database URL, with the schema brought to this code's version if it is behind."""
    url = database_url(args, settings)
    ensure_schema(url)
    return url


def cmd_migrate(args, settings: Settings) -> int:
    from indexer.db import migrate
    from indexer.db.schema import head_revision

    url = database_url(args, settings)
    migrate.upgrade(url)
    say(f"schema at {head_revision()} on {redact(url)}")
    return EXIT_OK


def cmd_db(args, settings: Settings) -> int:
    from indexer.db.embedded import EmbeddedCluster

    if args.reader and (args.action != "url" or args.database_url or settings.database_url):
        error("--reader goes with `db url` on the embedded server; on another server, indexer_reader logs in with "
              "the password its administrator set (deploy/: the reader_db_password secret)")
        return EXIT_INPUT
    if args.reader:  # the schema first: the migrations grant the reader schema api
        cluster = EmbeddedCluster(settings.indexer_home)
        ensure_schema(cluster.url())
        print(cluster.reader_url())
        return EXIT_OK
    if args.action == "url":
        print(database_url(args, settings))
        return EXIT_OK

    stopped = EmbeddedCluster(settings.indexer_home).stop()
    say("embedded PostgreSQL stopped" if stopped else "embedded PostgreSQL was not running")
    return EXIT_OK


QUARANTINE_SHOWN = 5  # quarantined lines an ingest names on stderr (all of them: api.quarantine)


def cmd_ingest(args, settings: Settings) -> int:
    import psycopg

    from indexer.cli.summaries import held_escrows, ingest_progress, print_ingest_summary
    from indexer.load import quarantined
    from indexer.load.ingest import ingest_paths
    from indexer.downstream import process_changes
    from indexer.replay.follow import ReplayFollower
    from indexer.sources.ndjson import InputError, check_input

    from indexer.archive import verify_archived

    archived = {}  # a restore: archive file -> when it was written
    for name in args.files:  # a missing, unreadable or damaged archive file is bad input before anything loads
        check_input(name)
        archived[name] = verify_archived(name)
    url = ready_database(args, settings)
    with psycopg.connect(url) as conn:  # the server's clock: which quarantine rows this command wrote
        started = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    failure = None
    with ReplayFollower(url) as follower:  # a long load's escrows are replayed while later batches load
        try:
            if args.no_progress or not console().is_terminal:
                summary = ingest_paths(url, args.files, batch_lines=args.batch_lines, on_batch=follower.batch,
                                       archived=archived)
            else:
                with ingest_progress() as progress:
                    summary = ingest_paths(url, args.files, batch_lines=args.batch_lines, progress=progress,
                                           on_batch=follower.batch, archived=archived)
        except InputError as exc:
            if getattr(exc, "partial", None) is None:
                raise
            failure, summary = exc, exc.partial  # what loaded before the bad file is committed: replay it anyway
        follower.wind_down()  # its last escrows replay while the downstream stage connects and makes partitions
        with psycopg.connect(url) as conn:
            downstream = process_changes(conn, url, replayed=follower.finish,
                                         deferred_analyze=summary.deferred_analyze)
    print_ingest_summary(summary, downstream)
    if failure is not None:
        error(f"{failure} (the records loaded before it were replayed and evaluated)")
        return EXIT_INPUT
    if downstream.replay.held:
        error(held_escrows(downstream.replay.held))
        return EXIT_RUNTIME
    if summary.kept_newer:  # a restore left newer stored records as they were: say which (not an input error)
        warn(f"{summary.kept_newer} archived record(s) not restored: the stored ones were written after the archive; "
             "see api.quarantine")
        if not summary.quarantined:
            with psycopg.connect(url) as conn:
                for source, line, reason in quarantined.since(conn, started, QUARANTINE_SHOWN):
                    warn(f"  {one_line(source)}:{line}: {one_line(reason, 300)}")
    if summary.quarantined and not args.allow_quarantine:
        warn(f"{summary.quarantined} line(s) quarantined; see api.quarantine")
        with psycopg.connect(url) as conn:
            shown = quarantined.since(conn, started, QUARANTINE_SHOWN)
        for source, line, reason in shown:
            warn(f"  {one_line(source)}:{line}: {one_line(reason, 300)}")
        if summary.quarantined > len(shown):
            warn(f"  and {summary.quarantined - len(shown)} more")
        return EXIT_INPUT
    return EXIT_OK


def cmd_replay(args, settings: Settings) -> int:
    import psycopg

    from indexer.cli.summaries import held_escrows
    from indexer.downstream import process_changes
    from indexer.replay.run import mark_all_dirty

    url = ready_database(args, settings)
    with psycopg.connect(url) as conn:
        if args.all:
            mark_all_dirty(conn)
        r = process_changes(conn, url).replay
    say(f"replayed {r.escrows} escrows, {r.txs} txs ({r.rejected} rejected) in {r.seconds:.2f}s")
    if r.held:
        error(held_escrows(r.held))
        return EXIT_RUNTIME
    return EXIT_OK


def cmd_rules(args, settings: Settings) -> int:
    import psycopg

    from indexer.rules.run import run_rules

    url = ready_database(args, settings)
    with psycopg.connect(url) as conn:
        summary = run_rules(conn, args.epochs)
    say(f"rules: {summary.epochs} epoch(s) evaluated, {summary.parsed} payload(s) parsed, "
        f"{summary.disputable} disputable penalt{'y' if summary.disputable == 1 else 'ies'} in {summary.seconds:.2f}s")
    return EXIT_OK


def cmd_export(args, settings: Settings) -> int:
    from indexer.load.export import export_records

    url = ready_database(args, settings)
    counts = export_records(url, args.file, args.epochs)
    say("exported " + ", ".join(f"{k}={v}" for k, v in counts.items() if v))
    return EXIT_OK


def cmd_evidence(args, settings: Settings) -> int:
    import psycopg

    from indexer.rules.evidence import EvidenceError, build_evidence
    from indexer.verify.evidence import verify_bundle

    url = ready_database(args, settings)
    try:
        with psycopg.connect(url) as conn:
            evidence = build_evidence(conn, args.escrow, args.inference)
    except EvidenceError as exc:
        error(str(exc))
        return EXIT_INPUT
    b = evidence.bundle
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(b.to_json())
    for note in evidence.notes:
        warn(note)
    say(f"wrote {args.out}: escrow {b.escrow_id}, {len(b.diffs)} signed diffs, "
        f"{'a' if b.settlement else 'no'} settlement, {len(b.penalties)} penalty derivation(s); checked here to "
        f"{verify_bundle(b).level} (python -m indexer.verify {args.out} checks it without this database)")
    return EXIT_OK


def cmd_archive(args, settings: Settings) -> int:
    from indexer.archive import archive

    url = ready_database(args, settings)
    summary = archive(url, args.before, args.to, force=args.force)
    say(f"archived {len(summary.dropped)} epoch(s) before {args.before} to {args.to}: {summary.records} records "
        f"({len(summary.written)} file(s) written, {len(summary.kept)} already there) in {summary.seconds:.2f}s")
    if summary.damaged:
        error(f"{args.to}: {len(summary.damaged)} file(s) listed in its manifest are missing or damaged: "
              + "; ".join(summary.damaged[:20]) + (" …" if len(summary.damaged) > 20 else "")
              + " (an epoch dropped from the database comes back only from a copy of its file)")
        return EXIT_RUNTIME
    return EXIT_OK


def cmd_report(args, settings: Settings) -> int:
    from rich.console import Console

    from indexer.reports.findings import collect, print_report
    from indexer.reports.html import collect_page, render_page

    if args.proposal and not (args.restitution and args.deposit):
        error("--proposal needs --restitution and --deposit COINS (the chain's governance min_deposit)")
        return EXIT_INPUT
    url = ready_database(args, settings)
    if args.restitution:
        from indexer.reports.restitution import collect as restitution_cases, restitution_summary, write_reports

        cases = restitution_cases(url, args.epochs)
        for path in write_reports(cases, args.out):
            say(f"wrote {path}")
        say(restitution_summary(cases))
        return write_proposal(cases, args) if args.proposal else EXIT_OK
    if args.html:
        from indexer.reports.restitution import collect as restitution_cases, html_block

        restitution_html = html_block(restitution_cases(url, args.epochs))
        with open(args.html, "w", encoding="utf-8") as fh:
            fh.write(render_page(collect_page(url, args.epochs), sections=(restitution_html,)))
        say(f"wrote {args.html}")
    else:
        print_report(collect(url, args.epochs), Console())
    return EXIT_OK


def write_proposal(cases, args) -> int:
    import json

    from indexer.reports.restitution.proposal import NothingToPay, ProposalError, build

    try:
        proposal = build(cases, args.deposit, args.vesting_epochs)
    except ProposalError as exc:
        error(str(exc))
        return EXIT_RUNTIME if isinstance(exc, NothingToPay) else EXIT_INPUT
    with open(args.proposal, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(proposal, indent=2) + "\n")
    outputs = proposal["messages"][0]["outputs"]
    say(f"wrote {args.proposal}: {len(outputs)} recipient(s), "
        f"{sum(int(o['amount'][0]['amount']) for o in outputs)} ngonka")
    return EXIT_OK


def cmd_demo(args, settings: Settings) -> int:
    from indexer.cli.demo import run_demo

    embedded = args.database_url is None and not settings.database_url
    if embedded:
        import shlex

        from indexer.cli.invocation import self_command

        home = shlex.quote(str(settings.indexer_home.resolve()))
        return run_demo(ready_database(args, settings), args, embedded=True,
                        start_over=f"{self_command()} db stop && rm -rf {home}")
    return run_demo(ready_database(args, settings), args)


def cmd_run(args, settings: Settings) -> int:
    from indexer.cli.alerting import alert_job, metrics_server, timed
    from indexer.cli.summaries import format_poll_summary
    from indexer.poller.awaited import AwaitPolicy
    from indexer.poller.cycle import poll_once
    from indexer.poller.freezing import freeze_job
    from indexer.poller.schedule import run_forever
    from indexer.settings import split_urls

    chain = split_urls(args.gonka_chain_rest_url) if args.gonka_chain_rest_url else settings.chain_rest_urls
    rpc = split_urls(args.gonka_rpc_url) if args.gonka_rpc_url else settings.rpc_urls
    if not chain or not rpc:
        error("set GONKA_CHAIN_REST_URL and GONKA_RPC_URL (or --gonka-chain-rest-url / --gonka-rpc-url)")
        return EXIT_INPUT
    operator = _operator(args, settings)
    if operator is not None and not _check_operator(operator, chain):
        return EXIT_RUNTIME
    url = ready_database(args, settings)
    alerts = None if args.no_alerts else alert_job(url, args, settings)
    server = metrics_server(args, settings, url)  # before polling: an address in use stops the start (exit 2)
    metrics = server.metrics if server else None
    options = {"validator": settings.validator_address, "operator": operator,
               "lease_seconds": args.lease_seconds or settings.lease_seconds,
               "private_hosts": args.allow_private_hosts, "archive_days": args.archive_days,
               "awaiting": AwaitPolicy(attempts=args.payload_attempts, backoff=args.payload_backoff)}
    try:
        if args.once:
            say(format_poll_summary(timed(lambda: poll_once(url, chain, rpc, **options), metrics)))
            if alerts:
                from indexer.alerts.job import format_delivery, format_evaluation

                say(format_evaluation(alerts.evaluate()))
                say(format_delivery(alerts.deliver()))
            return EXIT_OK

        def on_cycle(summary) -> None:
            if metrics:
                metrics.observe_cycle(summary.seconds)
            say(format_poll_summary(summary))

        def on_failure(exc) -> None:  # noqa: ARG001 - logged by the scheduler job
            if metrics:
                metrics.observe_cycle(0.0, "error")

        current = {"url": url}

        def on_url(new: str) -> None:  # the embedded server came back on another port: every job follows
            current["url"] = new
            if server:
                server.retarget(new)
            if alerts:
                alerts.url = new
            say(f"the embedded PostgreSQL is now at {redact(new)}")

        # beside the cycle: settled epochs' partitions frozen once (indexer.poller.freezing), and the alert jobs
        jobs = [freeze_job(lambda: current["url"]), *(alerts.scheduled(args.alerts_interval) if alerts else ())]
        run_forever(url, chain, rpc, interval=args.interval, on_cycle=on_cycle, on_failure=on_failure, jobs=jobs,
                    find_url=embedded_finder(args.database_url, settings), on_url=on_url, **options)
    finally:
        if server:
            server.close()
    return EXIT_OK


def cmd_alerts(args, settings: Settings) -> int:
    from indexer.cli.alerting import cmd_alerts as run_alerts

    return run_alerts(args, settings, ready_database(args, settings))


def cmd_status(args, settings: Settings) -> int:
    from indexer.cli.status import run_status

    if args.ready_max_lag is None:
        args.ready_max_lag = settings.ready_max_lag
    return run_status(database_url(args, settings), args)  # read only: no migration


def _operator(args, settings: Settings):
    """Operator mode from --gonka-operator-* options over GONKA_OPERATOR_* settings (None when not configured)."""
    from indexer.sources.gonka.signing import operator_from_env

    chosen = {"gonka_operator_address": args.gonka_operator_address or settings.operator_address,
              "gonka_operator_key_file": args.gonka_operator_key_file or settings.operator_key_file,
              "gonka_operator_member": args.gonka_operator_member or settings.operator_member}
    return operator_from_env({k: str(v) for k, v in chosen.items() if v})


def _check_operator(operator, chain_urls) -> bool:
    """Refuse (OperatorConfigError: exit 2) a key file whose key is neither the configured address's nor a grantee
    of it, before any cycle signs with it (indexer.sources.gonka.identity). False, said in one line naming the URL,
    when the chain did not answer the check (exit 1: a runtime failure, the same start may pass later)."""
    from indexer.sources.gonka import ChainRest, Fetcher, FetchError
    from indexer.sources.gonka.identity import check_operator_key

    fetcher = Fetcher(chain_urls, name="chain")
    try:
        check_operator_key(operator, ChainRest(fetcher))
    except FetchError as exc:
        error(f"the operator key check could not read the chain: {exc}; not started (try again once the chain "
              "REST answers)")
        return False
    finally:
        fetcher.close()
    return True


def cmd_devnet(args, settings: Settings) -> int:  # noqa: ARG001 - the devnet needs no database
    from indexer.devnet.options import is_loopback
    from indexer.devnet.run import serve

    if not is_loopback(args.bind):
        error("the devnet only binds to loopback")
        return EXIT_INPUT
    serve(args, on_ready=lambda server: say(
        f"devnet serving; export GONKA_CHAIN_REST_URL={server.chain_rest_url} GONKA_RPC_URL={server.rpc_url}; "
        "Ctrl-C stops"))
    return EXIT_OK

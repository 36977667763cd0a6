"""`indexer demo`: the devnet with the situations of upstream #2078, polled epoch by epoch over HTTP (so the poller
captures escrows before the devnet prunes them), then the findings report. --sample FILE ingests NDJSON instead."""
from __future__ import annotations

import shlex
import sys

import psycopg

from indexer.cli.output import EXIT_OK, console, say


def run_demo(url: str, args, *, embedded: bool = False, start_over: str = "give it an empty database") -> int:
    """``embedded``: the database is the embedded server, so the closing hint logs in as the read-only reader.
    ``start_over``: how the user gets an empty database again, named when the devnet is not polled into one that
    holds epochs already."""
    from indexer.reports.findings import collect, print_report

    if args.sample:
        from indexer.load.ingest import ingest_paths
        from indexer.downstream import process_changes

        summary = ingest_paths(url, [args.sample])
        with psycopg.connect(url) as conn:
            process_changes(conn, url, deferred_analyze=summary.deferred_analyze)
        say(f"demo: {summary.lines} records from {args.sample} ({summary.loaded} new)")
    elif (stored := _stored_epochs(url)) is not None:
        # a second `make demo`: the devnet starts over at its first epoch, behind what is stored, and the poller
        # rightly refuses a chain behind the database; the stored findings are shown instead
        say(f"demo: the database already holds epochs {stored[0]}..{stored[1]} (an earlier demo, or data of its "
            f"own): the devnet, which starts at its first epoch, is not polled into it. The findings below are the "
            f"stored ones. To start over: {start_over}")
    else:
        _poll_devnet(url, epochs=args.epochs, seed=args.seed)
    print_report(collect(url), console())
    from indexer.cli.invocation import self_command

    login = "db url --reader" if embedded else "db url"  # the reader reads api, all an analyst needs
    say(f"query the views yourself: psql \"$({self_command()} {login})\" -c 'select * from api.disputable_penalties'")
    with psycopg.connect(url) as conn:
        penalty = conn.execute("SELECT escrow_id, inference_id FROM api.disputable_penalties "
                               "WHERE evidence_level = 'settled' ORDER BY epoch_index, escrow_id, inference_id "
                               "LIMIT 1").fetchone()
    if penalty is not None:  # the escrow id is a decimal string from the chain; quoted all the same
        say(f"check one without trusting this database: {self_command()} evidence {shlex.quote(penalty[0])} "
            f"{penalty[1]} --out evidence.json && {shlex.quote(sys.executable)} -m indexer.verify evidence.json")
    from indexer.reports.restitution import collect as restitution_cases, restitution_summary

    # last: the hosts whose epoch outcome the disputable penalties flipped (api.restitution_impact)
    say(restitution_summary(restitution_cases(url)))
    return EXIT_OK


def _stored_epochs(url: str) -> tuple[int, int] | None:
    """The first and last epoch the database holds, None when it holds none."""
    with psycopg.connect(url) as conn:
        first, last = conn.execute("SELECT min(epoch_index), max(epoch_index) FROM api.epochs").fetchone()
    return None if first is None else (first, last)


def _poll_devnet(url: str, *, epochs: int, seed: int) -> None:
    from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
    from indexer.poller.cycle import poll_once

    scenario = Scenario(ScenarioConfig(seed=seed, epochs=epochs, escrows_per_epoch=3, inferences_per_escrow=60))
    with DevnetServer(scenario) as server:
        say(f"devnet on {server.url}: {epochs} epochs, {len(scenario.escrows)} escrows, "
            f"{len(scenario.hosts)} hosts (some with a raised local --max-model-len)")
        for step in range(epochs + 1):  # one extra step lets the last epoch settle
            summary = poll_once(url, server.chain_rest_url, server.rpc_url, private_hosts=True)
            say(f"  epoch {summary.epoch}: {summary.escrows} escrow(s) polled, "
                f"{summary.replayed_escrows} replayed, {summary.rules_epochs} epoch(s) evaluated")
            if step < epochs:
                server.advance_epoch()

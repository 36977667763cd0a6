"""`indexer demo`: embedded PostgreSQL (unless a URL is given) + the devnet with the situations of upstream #2078
+ the poller for a few epochs + the rules, then the findings report."""
from __future__ import annotations

from indexer.cli import EXIT_OK, console


def run_demo(args) -> int:
    """Default: the devnet over HTTP, polled epoch by epoch (so the poller captures escrows before the devnet prunes
    them), then the rules and the report. --sample FILE ingests a normalized NDJSON file instead."""
    from indexer.commands import database_url, ensure_schema, process_changes
    from indexer.report import collect, print_report

    url = database_url(args)
    ensure_schema(url)
    if args.sample:
        from indexer.load.ingest import ingest_paths

        summary = ingest_paths(url, [args.sample])
        process_changes(url)
        console.print(f"demo: {summary.lines} records from {args.sample} ({summary.loaded} new)")
    else:
        _poll_devnet(url, epochs=args.epochs, seed=args.seed)
    print_report(collect(url), console)
    console.print("query the views yourself: psql \"$(indexer db url)\" -c 'select * from api.disputable_penalties'")
    return EXIT_OK


def _poll_devnet(url: str, *, epochs: int, seed: int) -> None:
    from indexer.devnet.scenario import Scenario, ScenarioConfig
    from indexer.devnet.server import DevnetServer
    from indexer.poller.cycle import poll_once

    scenario = Scenario(ScenarioConfig(seed=seed, epochs=epochs, escrows_per_epoch=3, inferences_per_escrow=60))
    with DevnetServer(scenario) as server:
        console.print(f"devnet on {server.url}: {epochs} epochs, {len(scenario.escrows)} escrows, "
                      f"{len(scenario.hosts)} hosts (some with a raised local --max-model-len)")
        for step in range(epochs + 1):  # one extra step lets the last epoch settle
            summary = poll_once(url, server.chain_rest_url, server.rpc_url)
            console.print(f"  epoch {summary.epoch}: {summary.escrows} escrow(s) polled, "
                          f"{summary.replayed_escrows} replayed, {summary.rules_epochs} epoch(s) evaluated")
            if step < epochs:
                server.advance_epoch()

"""`indexer demo`: a devnet scenario with the situations of upstream #2078 through the whole pipeline, then the
findings report. Uses the database in use (embedded unless a URL is given)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import psycopg

from indexer.cli import EXIT_OK, console


def scenario_records(seed: int = 2078, epochs: int = 3, escrows: int = 3, inferences: int = 60):
    """Normalized records of a devnet scenario: epochs, model snapshots, escrows, their logs, host stats."""
    from indexer.devnet.scenario import Scenario, ScenarioConfig

    sc = Scenario(ScenarioConfig(seed=seed, epochs=epochs, escrows_per_epoch=escrows,
                                 inferences_per_escrow=inferences))
    for ep in sc.epochs:
        yield {"kind": "epoch", "epoch_index": ep.epoch_index, "start_height": ep.start_height}
        for model in ep.models:
            yield {"kind": "model_snapshot", "epoch_index": ep.epoch_index, "model_id": model.model_id,
                   "model_args": list(model.model_args)}
        for esc in ep.escrows:
            yield {"kind": "escrow", "escrow_id": esc.escrow_id, "epoch_index": esc.epoch_index,
                   "model_id": esc.model.model_id, "slots": esc.slots,
                   "vote_threshold_factor": esc.vote_threshold_factor, "validation_rate": esc.validation_rate,
                   "protocol_version": esc.protocol_version, "settled": True}
            yield from sc.tx_records(esc.escrow_id)
            for slot, stats in enumerate(esc.host_stats()):
                yield {"kind": "host_stats", "escrow_id": esc.escrow_id, "slot_id": slot,
                       **{k: v for k, v in stats.items() if k != "slot_id"}}


def run_demo(args) -> int:
    from indexer.commands import database_url, ensure_schema, process_changes
    from indexer.load.ingest import ingest_paths
    from indexer.report import collect, print_report

    url = database_url(args)
    ensure_schema(url)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.sample) if args.sample else Path(tmp) / "devnet-scenario.ndjson"
        if not args.sample:
            with open(path, "wb") as fh:
                for rec in scenario_records():
                    fh.write(orjson.dumps(rec, default=str) + b"\n")
        summary = ingest_paths(url, [str(path)])
    downstream = process_changes(url)
    with psycopg.connect(url) as conn:  # the demo always shows every epoch, not only what changed
        from indexer.rules.run import run_rules

        run_rules(conn, (0, 2**62))
    console.print(f"demo: {summary.lines} records loaded ({summary.loaded} new), "
                  f"{downstream['replay'].escrows} escrows replayed")
    print_report(collect(url), console)
    console.print("query the views yourself: psql \"$(indexer db url)\" -c 'select * from api.disputable_penalties'")
    return EXIT_OK

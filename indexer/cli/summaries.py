"""How the CLI shows a stage's result: tables and one-line summaries, built from the stages' summary objects."""
from __future__ import annotations

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from indexer.cli.output import console


def ingest_progress() -> Progress:
    return Progress(TextColumn("{task.description}", style="cyan", markup=False), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(), console=console(), transient=False)


def print_ingest_summary(summary, downstream) -> None:
    t = Table(title="ingest summary", show_header=False)
    replay, rules = downstream.replay, downstream.rules
    rows = [("files", summary.files), ("lines", summary.lines), ("loaded (new)", summary.loaded),
            ("amended", summary.amended), ("unchanged", summary.unchanged), ("quarantined", summary.quarantined),
            ("archived records older than the stored ones (not restored)", summary.kept_newer),
            ("poller state rows (an export's)", summary.poller_state),
            ("resumed past (already committed)", summary.skipped_resumed), ("escrows touched", replay.escrows),
            ("txs replayed", replay.txs), ("txs rejected by the state machine", replay.rejected),
            ("escrow logs verified (evidence new or changed)", replay.verified),
            ("seconds (load / replay / rules)", f"{summary.seconds:.2f} / {replay.seconds:.2f} / {rules.seconds:.2f}"),
            ("epochs re-evaluated", rules.epochs)]
    if replay.held:
        rows.append(("escrows left dirty (their replay kills its process)", len(replay.held)))
    for name, value in rows:
        t.add_row(name, str(value))
    console().print(t)


def held_escrows(ids: list[str]) -> str:
    """The error line for escrows whose replay killed its process, the last time alone (ReplaySummary.held)."""
    shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    return (f"replay: {len(ids)} escrow(s) kill their replay process even alone and were left dirty: {shown}; "
            "every other escrow was replayed and evaluated, and the next replay tries these again")


def format_poll_summary(s) -> str:
    shared = (f"; {s.escrows_elsewhere} escrow(s) and {s.epochs_elsewhere} epoch(s) done by other pollers, "
              f"{s.takeovers} lease(s) taken over" if s.escrows_elsewhere or s.epochs_elsewhere or s.takeovers
              else "")
    payloads = (f"; payloads asked again {s.payloads_asked}, obtained {s.payloads_obtained}, given up "
                f"{s.payloads_given_up}" if s.payloads_asked else "")
    return (f"poll: epoch {s.epoch} (window {s.epochs[0] if s.epochs else '-'}..{s.epoch}), {s.escrows} escrow(s) "
            f"fetched, {s.escrows_skipped_final} final, {s.escrows_pruned} pruned, {s.escrows_failed} failed, "
            f"{s.escrows_stalled} stalled; epochs "
            f"{', '.join(f'{e} {st}' for e, st in sorted(s.epoch_states.items())) or '-'}; "
            f"{s.diffs} diffs, {s.txs} txs, {s.loaded} new / {s.amended} amended rows; {s.requests} requests; "
            f"replayed {s.replayed_escrows} escrow(s), rules on {s.rules_epochs} epoch(s); {s.seconds:.2f}s"
            f"{payloads}{shared}")

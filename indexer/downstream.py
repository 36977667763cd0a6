"""What happens downstream of new records, in one place for every caller (`indexer ingest`, `indexer replay`, the
poller, the demo): fresh statistics when many rows arrived, the next epoch's partitions, replay of the dirty
escrows, then the rules stage on the dirty epochs. Prints nothing; returns what it did."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from indexer.db.quickstats import Deferred
from indexer.load.summary import IngestSummary, analyze_grown
from indexer.load.partitions import ensure_ahead
from indexer.replay.run import REPLAY_WORKERS, ReplaySummary, replay_dirty
from indexer.rules.run import RULES_WORKERS, RulesSummary, run_rules


@dataclass
class Downstream:
    replay: ReplaySummary  # each summary carries its own seconds
    rules: RulesSummary


def process_changes(conn: psycopg.Connection, url: str, *, loaded: IngestSummary | None = None,
                    replay_workers: int = REPLAY_WORKERS,
                    replayed: ReplaySummary | Callable[[], ReplaySummary] | None = None,
                    deferred_analyze: Deferred | None = None) -> Downstream:
    """Replay dirty escrows, then evaluate dirty epochs. ``loaded``: what the caller just loaded without analysing
    it (the poller's commits, added up); what it grew is analysed first (:func:`analyze_grown`, the rule the NDJSON
    loader applies to its own load) so the replay's and the rules' plans see the new rows. ``replayed``: what a
    replay that followed the load did already (indexer.replay.follow), counted in the replay's summary; or the
    function that waits for that replay to end (ReplayFollower.finish), called once the partitions ahead are made,
    so that their catalog probes run while the follower replays its last escrows.
    ``deferred_analyze``: tables whose post-load ANALYZE was skipped while autovacuum held them; with those the
    replay skips, they are analysed (unless autovacuum did it meanwhile) as the rules stage starts, which is the
    stage whose plans need them (indexer.db.quickstats)."""
    deferred = Deferred()
    deferred.add(deferred_analyze)
    if loaded is not None:
        deferred.add(analyze_grown(conn, loaded))
    ensure_ahead(conn)  # the next epoch's partitions before its first records (docs/partitioning.md)
    if callable(replayed):
        replayed = replayed()
    replay = replay_dirty(conn, url=url, workers=replay_workers, prior=replayed)
    deferred.add(replay.deferred_analyze)
    return Downstream(replay, run_rules(conn, deferred_analyze=deferred, url=url, workers=RULES_WORKERS))

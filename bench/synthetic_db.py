"""A replayed synthetic history for the benchmarks that time the rules stage (bench/rules_bench.py,
bench/change_bench.py): one place that writes the file, loads it, replays it and clears the epochs' dirty marks, so
both measure the rules against the same kind of database."""
from __future__ import annotations

import time
from pathlib import Path

import psycopg

from indexer.load.ingest import ingest_paths
from indexer.replay.run import replay_dirty
from indexer.synth import generate, write_ndjson


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def replayed_history(url: str, path: Path, *, escrows: int, inferences: int, epochs: int, **mix) -> str:
    """Write ``escrows`` synthetic escrows of ``inferences`` each over ``epochs`` epochs to ``path`` (seed 3), ingest
    and replay them into ``url``, and leave no epoch dirty; returns the summary line the benchmark prints."""
    n = write_ndjson(str(path), generate(seed=3, escrows=escrows, inferences=inferences, epochs=epochs, **mix))
    load = timed(lambda: ingest_paths(url, [str(path)]))
    with psycopg.connect(url) as conn:
        replay_s = timed(lambda: replay_dirty(conn))
        conn.execute("DELETE FROM rules.dirty_epoch")
        conn.commit()
        made = conn.execute("SELECT count(*) FROM replay.inference").fetchone()[0]
    return f"database: {n:,} records, {made:,} inferences, {epochs} epochs (load {load:.1f}s, replay {replay_s:.1f}s)"

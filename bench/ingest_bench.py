"""Ingest + replay benchmark against the same-run baseline: raw COPY of the file's lines into an unlogged
one-column jsonb table. Prints throughput, the ratio to the baseline (target ≥ 0.25×) and the ingest's peak RSS.

    python bench/ingest_bench.py [--records 1000000] [--database-url URL] [--keep]
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer.db import migrate  # noqa: E402
from indexer.db.scratch import scratch_database  # noqa: E402
from indexer.db.url import resolve_database_url  # noqa: E402
from indexer.synth import generate, write_ndjson  # noqa: E402


def make_file(path: Path, records: int, mix: str) -> int:
    inferences = 300
    per_escrow = inferences * 3.35 + 17  # measured average records per synthetic escrow
    escrows = max(1, round(records / per_escrow / 2))
    return write_ndjson(str(path), generate(seed=1, escrows=escrows, inferences=inferences, epochs=2, hosts=10,
                                            mix=mix))


def baseline_copy(url: str, path: Path) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_baseline")
        conn.execute("CREATE UNLOGGED TABLE bench_baseline (doc jsonb)")
        start = time.perf_counter()
        with conn.cursor().copy("COPY bench_baseline (doc) FROM STDIN") as cp, open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                cp.write(chunk.replace(b"\\", b"\\\\"))
        elapsed = time.perf_counter() - start
        conn.execute("DROP TABLE bench_baseline")
    return elapsed


def timed_ingest(url: str, path: Path) -> tuple[float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "indexer", "--database-url", url, "ingest", str(path),
                          "--no-progress"], check=True, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    elapsed = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    stages = re.search(r"seconds \(load / replay / rules\)\s*│\s*([0-9.]+) / ([0-9.]+) / ([0-9.]+)", run.stderr)
    return elapsed, max(peak_kb, before), tuple(float(x) for x in stages.groups()) if stages else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--database-url")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark database")
    ap.add_argument("--mix", choices=["mainnet", "adversarial"], default="mainnet")
    args = ap.parse_args()
    server = resolve_database_url(args.database_url)
    with scratch_database(server, "bench", keep=args.keep) as url:
        migrate.upgrade(url)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.ndjson"
            t = time.perf_counter()
            lines = make_file(path, args.records, args.mix)
            size = path.stat().st_size
            print(f"generated {lines:,} records ({size / 1e6:.0f} MB, {args.mix} mix) in {time.perf_counter() - t:.1f}s")
            base = baseline_copy(url, path)
            ingest_s, peak_kb, stages = timed_ingest(url, path)
        with psycopg.connect(url) as c:
            inferences = c.execute("SELECT count(*) FROM replay.inference").fetchone()[0]
        load_s, replay_s, rules_s = stages or (ingest_s, 0.0, 0.0)
        core = load_s + replay_s
        ratio = base / core
        print(f"baseline  raw COPY into unlogged jsonb : {base:7.2f}s  {lines / base:10,.0f} lines/s")
        print(f"indexer   load + replay                : {core:7.2f}s  {lines / core:10,.0f} lines/s "
              f"(load {load_s:.2f}s, replay {replay_s:.2f}s; {inferences:,} inferences)")
        print(f"          whole `indexer ingest` command : {ingest_s:7.2f}s  (+ rules {rules_s:.2f}s, start-up, ANALYZE)")
        print(f"ratio     load + replay / baseline     : {ratio:.2f}x  (target >= 0.25x, aim 0.5x); whole command "
              f"{base / ingest_s:.2f}x")
        print(f"peak RSS  of the ingest process        : {peak_kb / 1024:.0f} MB  (target < 300 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

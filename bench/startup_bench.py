"""Start-up cost of commands with nothing to do, against the least any database command must pay (a Python process
that imports psycopg and opens one connection), measured in the same run. Prints medians and ratios.

    .venv/bin/python bench/startup_bench.py [--database-url URL] [--runs 7]

Target (issue 8): a command with nothing to do returns in <= 0.3 s.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer.db import migrate  # noqa: E402
from indexer.db.url import resolve_database_url  # noqa: E402


def median_seconds(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database-url", help="database to use (default: $DATABASE_URL, else the embedded one)")
    p.add_argument("--runs", type=int, default=7, help="runs of each command (default 7)")
    args = p.parse_args()
    url = resolve_database_url(args.database_url)
    migrate.upgrade(url)
    indexer = [sys.executable, "-m", "indexer", "--database-url", url]
    with tempfile.NamedTemporaryFile(suffix=".ndjson") as empty:
        cases = {
            "baseline: python + import psycopg + connect": [sys.executable, "-c",
                                                            f"import psycopg; psycopg.connect({url!r}).close()"],
            "indexer --help": [sys.executable, "-m", "indexer", "--help"],
            "indexer rules (nothing dirty)": indexer + ["rules"],
            "indexer replay (nothing dirty)": indexer + ["replay"],
            "indexer ingest (empty file)": indexer + ["ingest", "--no-progress", empty.name],
        }
        results = {name: median_seconds(cmd, args.runs) for name, cmd in cases.items()}
    base = results["baseline: python + import psycopg + connect"]
    for name, seconds in results.items():
        print(f"{name:48s} {seconds:6.3f} s  {seconds / base:5.2f}x baseline")


if __name__ == "__main__":
    main()

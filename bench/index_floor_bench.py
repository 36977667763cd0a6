"""What each secondary index costs the ingest's write floor: the rows an `indexer ingest` of a file wrote to the rec
and replay tables, copied into fresh databases with one COPY per table (as `ingest_bench.py --floor` does), once
with every index and once per variant with the named indexes dropped; server CPU seconds, medians of --repeat.

    .venv/bin/python bench/index_floor_bench.py --file F --drop rec.ix_start_tx_sibling_key --repeat 3
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_bench import settle, timed_ingest  # noqa: E402
from cpu import postgres_cpu  # noqa: E402
from indexer.db import migrate  # noqa: E402
from indexer.db.scratch import scratch_database  # noqa: E402
from indexer.db.url import resolve_database_url  # noqa: E402
from indexer.load.partitions import ensure_epochs  # noqa: E402

_TABLES = ("SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
           "WHERE n.nspname IN ('rec', 'replay') AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
           "AND c.relname <> 'dirty_escrow' ORDER BY n.nspname, c.relname <> 'source', c.relname")


def dump(server: str, path: Path, into: Path) -> tuple[list[str], list[int]]:
    """Ingest ``path`` into a scratch database and write each rec/replay table's rows to a file in ``into``."""
    with scratch_database(server, "bench_index") as url:
        migrate.upgrade(url)
        timed_ingest(url, path)
        with psycopg.connect(url) as src:
            tables = [r[0] for r in src.execute(_TABLES)]
            epochs = [r[0] for r in src.execute("SELECT DISTINCT epoch_index FROM rec.escrow "
                                                "WHERE epoch_index IS NOT NULL")]
            for table in tables:
                with open(into / table, "wb") as out, \
                        src.cursor().copy(f"COPY (SELECT * FROM {table}) TO STDOUT") as cp:
                    for chunk in cp:
                        out.write(chunk)
    return tables, epochs


def write_once(server: str, tables: list[str], epochs: list[int], rows: Path, drops: list[str]) -> tuple[float, float]:
    """(seconds, server CPU seconds) of writing the dumped rows into a fresh database without ``drops``."""
    with scratch_database(server, "bench_index_floor") as url:
        migrate.upgrade(url)
        with psycopg.connect(url) as dst:
            ensure_epochs(dst, epochs)
            for index in drops:
                dst.execute(f"DROP INDEX {index}")  # names from the command line of whoever runs the bench
            dst.commit()
        settle(url)
        with psycopg.connect(url) as dst:
            cpu, start = postgres_cpu(url), time.perf_counter()
            for table in tables:
                with dst.cursor().copy(f"COPY {table} FROM STDIN") as cp, open(rows / table, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        cp.write(chunk)
            dst.commit()
            return time.perf_counter() - start, postgres_cpu(url) - cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", type=Path, required=True, help="NDJSON file to ingest (e.g. one ingest_bench.py made)")
    ap.add_argument("--drop", action="append", default=[],
                    help="a variant: index names to drop, joined by '+' (schema-qualified); repeatable")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the variants alternate within each round")
    ap.add_argument("--database-url", help="server to measure (default: DATABASE_URL, else the embedded cluster)")
    args = ap.parse_args()
    server = resolve_database_url(args.database_url)
    variants = {"every index": []} | {v: v.split("+") for v in args.drop}
    with tempfile.TemporaryDirectory() as tmp:
        tables, epochs = dump(server, args.file, Path(tmp))
        runs: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
        for _ in range(args.repeat):
            for name, drops in variants.items():
                runs[name].append(write_once(server, tables, epochs, Path(tmp), drops))
    base = statistics.median(cpu for _, cpu in runs["every index"])
    for name, rs in runs.items():
        cpu = statistics.median(c for _, c in rs)
        ratio = f"{cpu / base:.3f}" if base > 0 else "n/a"  # a file too small to register server CPU at all
        print(f"{name:60s} server CPU {cpu:6.2f}s ({ratio}x)  wall {statistics.median(s for s, _ in rs):6.2f}s"
              f"  rounds {', '.join(f'{c:.2f}' for _, c in rs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A load with many open quarantine rows: --open rows of kind start (a bad prompt_hash, over 1,000 escrows) are
quarantined first, then a file of --escrows fresh escrows with --starts starts each, plus 100 valid starts of the
open keys, loads in batches of --batch lines. Prints the load's seconds and the seconds spent resolving quarantine
rows (indexer.load.resolved), medians of --repeat fresh databases. To compare revisions, run the same script inside
each tree (it measures the tree it lives in).

    .venv/bin/python bench/quarantine_bench.py --open 10000 --batch 5000 --repeat 5
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer.db import migrate  # noqa: E402
from indexer.db.scratch import scratch_database  # noqa: E402
from indexer.db.url import resolve_database_url  # noqa: E402
from indexer.load import resolved  # noqa: E402
from indexer.load.ingest import ingest_paths  # noqa: E402

H = "ab" * 32
_spent = [0.0]


def _timed(real):
    def resolve(*args, **kw):
        t0 = time.perf_counter()
        try:
            return real(*args, **kw)
        finally:
            _spent[0] += time.perf_counter() - t0
    return resolve


def _start(escrow: str, inference: int, prompt_hash: str = H) -> dict:
    return {"kind": "start", "escrow_id": escrow, "inference_id": inference, "diff_nonce": inference,
            "prompt_hash": prompt_hash, "model": "m", "input_length": 10, "max_tokens": 5, "started_at": 1767225600}


def _write(path: Path, records) -> str:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))
    return str(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--open", type=int, default=10_000, help="open quarantine rows before the measured load")
    ap.add_argument("--escrows", type=int, default=1000, help="fresh escrows in the measured load")
    ap.add_argument("--starts", type=int, default=50, help="starts per fresh escrow")
    ap.add_argument("--batch", type=int, default=5000, help="lines per batch of the measured load")
    ap.add_argument("--repeat", type=int, default=3, help="fresh databases; medians are printed")
    ap.add_argument("--database-url", help="server to measure (default: DATABASE_URL, else the embedded cluster)")
    args = ap.parse_args()
    resolved.resolve = _timed(resolved.resolve)  # the loader calls it through the module
    server = resolve_database_url(args.database_url)
    loads, spent = [], []
    with tempfile.TemporaryDirectory() as tmp:
        bad = _write(Path(tmp) / "bad.ndjson", (_start(f"q{n % 1000}", n, "zz") for n in range(args.open)))
        good = [{"kind": "escrow", "escrow_id": f"f{e}", "epoch_index": 7, "model_id": "m", "slots": ["a", "b"],
                 "vote_threshold_factor": 50} for e in range(args.escrows)]
        good += [_start(f"f{e}", i) for e in range(args.escrows) for i in range(args.starts)]
        good += [_start(f"q{n % 1000}", n) for n in range(min(100, args.open))]
        load = _write(Path(tmp) / "load.ndjson", good)
        for _ in range(args.repeat):
            with scratch_database(server, "bench_quarantine") as url:
                migrate.upgrade(url)
                ingest_paths(url, [bad])
                _spent[0] = 0.0
                t0 = time.perf_counter()
                ingest_paths(url, [load], batch_lines=args.batch)
                loads.append(time.perf_counter() - t0)
                spent.append(_spent[0])
                with psycopg.connect(url) as c:
                    still_open, done = c.execute("SELECT count(*) FILTER (WHERE resolved_at IS NULL), "
                                                 "count(resolved_at) FROM rec.quarantine").fetchone()
    print(f"{len(good)} lines in batches of {args.batch}, {args.open} open quarantine rows: load "
          f"{statistics.median(loads):.2f} s, resolving {statistics.median(spent) * 1000:.0f} ms "
          f"(medians of {args.repeat}); afterwards {still_open} open, {done} resolved")
    return 0


if __name__ == "__main__":
    sys.exit(main())

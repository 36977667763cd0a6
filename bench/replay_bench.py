"""Replay benchmark: time `replay_dirty` on one ingested synthetic file, optionally against a baseline revision in
the same run (alternating, so both see the same machine load), and check that both write identical replay tables.

    python bench/replay_bench.py [--escrows 479] [--mix mainnet] [--runs 3] [--workers 1 2] [--baseline REV]

Each measurement runs in a fresh subprocess that imports `indexer` from the tree under test, marks every escrow
dirty, times `replay_dirty` alone (wall and the CPU of the Python processes), then prints a digest of the replay tables (replayed_at excluded).
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Every column but replay.escrow.replayed_at (a timestamp), each table in a total order.
_TABLES = {
    "replay.inference": "escrow_id, inference_id",
    "replay.rejected_tx": "escrow_id, ordinal",
    "replay.vote": "escrow_id, inference_id, ordinal",
    "replay.slot_stats": "escrow_id, slot_id",
    "replay.escrow": "escrow_id",
}


def child(tree: str, url: str, workers: int, chunk: int | None) -> None:
    sys.path.insert(0, tree)
    import psycopg
    from indexer.replay import run as rr
    with psycopg.connect(url) as conn:
        rr.mark_all_dirty(conn)
        conn.commit()
        kw = {"chunk": chunk} if chunk else {}
        t, cpu = time.perf_counter(), _cpu()
        rr.replay_dirty(conn, url=url, workers=workers, **kw)
        elapsed, cpu = time.perf_counter() - t, _cpu() - cpu
        digests = []
        for table, order in _TABLES.items():
            cols = "escrow_id, epoch_index, group_size, vote_threshold, tx_count, rejected_count" \
                if table == "replay.escrow" else "t.*"
            digests.append(conn.execute(
                f"SELECT md5(coalesce(string_agg(r, E'\\n'), '')) FROM "
                f"(SELECT ({cols})::text AS r FROM {table} t ORDER BY {order}) s").fetchone()[0][:8])
    print(f"{elapsed:.4f} {cpu:.4f} {'-'.join(digests)}")


def _cpu() -> float:
    # This process and its reaped pool workers: the Python side only (the server's CPU is not counted).
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(tree: Path, url: str, workers: int, chunk: int | None) -> tuple[float, float, str]:
    out = subprocess.run([sys.executable, __file__, "--child", str(tree), url, str(workers), str(chunk or 0)],
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), out[2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--escrows", type=int, default=479)
    ap.add_argument("--mix", choices=["mainnet", "adversarial"], default="mainnet")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--chunk", type=int, default=0, help="escrows per chunk (0: the module's default)")
    ap.add_argument("--baseline", help="git revision to compare with (extracted with git archive)")
    ap.add_argument("--database-url")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from indexer.db import migrate
    from indexer.db.scratch import scratch_database
    from indexer.db.url import resolve_database_url
    from indexer.load import ingest
    from indexer.synth import generate, write_ndjson

    with tempfile.TemporaryDirectory() as tmp:
        trees = {"current": ROOT}
        if args.baseline:
            base = Path(tmp) / "baseline"
            base.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
            trees = {"baseline": base, **trees}
        path = Path(tmp) / "replay_bench.ndjson"
        lines = write_ndjson(str(path), generate(seed=1, escrows=args.escrows, inferences=300, epochs=2, hosts=10,
                                                 mix=args.mix))
        server = resolve_database_url(args.database_url)
        with scratch_database(server, "rb") as url:
            migrate.upgrade(url)
            t = time.perf_counter()
            ingest.ingest_paths(url, [str(path)])
            print(f"{lines:,} records ({args.mix}) ingested in {time.perf_counter() - t:.1f}s")
            times: dict[tuple[str, int], list[tuple[float, float]]] = {}
            digests: set[str] = set()
            for _ in range(args.runs):
                for workers in args.workers:
                    for name, tree in trees.items():
                        wall, cpu, digest = measure(tree, url, workers, args.chunk)
                        times.setdefault((name, workers), []).append((wall, cpu))
                        digests.add(digest)
            for (name, workers), runs in times.items():
                walls, cpus = [w for w, _ in runs], [c for _, c in runs]
                print(f"{name:9} workers={workers}: wall median {statistics.median(walls):.2f}s "
                      f"(min {min(walls):.2f}), python CPU median {statistics.median(cpus):.2f}s (min {min(cpus):.2f})")
            print(f"replay tables identical across all runs: {len(digests) == 1} ({', '.join(sorted(digests))})")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]) or None)
        sys.exit(0)
    sys.exit(main())

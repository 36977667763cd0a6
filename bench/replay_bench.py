"""Replay benchmark: time `replay_dirty` on one ingested synthetic file, optionally against a baseline revision in
the same run (alternating, so both see the same machine load), and check that both write identical replay tables.

    python bench/replay_bench.py [--escrows 479] [--mix mainnet] [--perturb 0.1] [--runs 3] [--workers 1 2]
                                [--chunk N] [--baseline REV]

Each measurement runs in a fresh subprocess that imports `indexer` from the tree under test, empties the replay
tables (as after an ingest), marks every escrow dirty, times `replay_dirty` alone (wall, the CPU of the Python
processes and, for the embedded cluster, of the server), then prints a digest of the replay tables (replayed_at
excluded). --perturb mutates a share of the txs so that the tables also hold rejections, ignored votes and drains.
"""
from __future__ import annotations

import argparse
import os
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


def child(tree: str, url: str, workers: int, chunk: int | None, postmaster: int) -> None:
    sys.path.insert(0, tree)
    import psycopg
    from indexer.replay import run as rr
    with psycopg.connect(url) as conn:
        conn.execute(f"TRUNCATE {', '.join(_TABLES)}")  # as after an ingest: nothing to delete, no dead rows
        rr.mark_all_dirty(conn)
        conn.commit()
        kw = {"chunk": chunk} if chunk else {}
        t, cpu, server = time.perf_counter(), _cpu(), _server_cpu(postmaster)
        rr.replay_dirty(conn, url=url, workers=workers, **kw)
        elapsed, cpu, server = time.perf_counter() - t, _cpu() - cpu, _server_cpu(postmaster) - server
        digests = []
        for table, order in _TABLES.items():
            cols = "escrow_id, epoch_index, group_size, vote_threshold, tx_count, rejected_count" \
                if table == "replay.escrow" else "t.*"
            digests.append(conn.execute(
                f"SELECT md5(coalesce(string_agg(r, E'\\n'), '')) FROM "
                f"(SELECT ({cols})::text AS r FROM {table} t ORDER BY {order}) s").fetchone()[0][:8])
    print(f"{elapsed:.4f} {cpu:.4f} {server:.4f} {'-'.join(digests)}")


def _cpu() -> float:
    # This process and its reaped pool workers: the Python side only (the server's CPU is not counted).
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _server_cpu(postmaster: int) -> float:
    """CPU of a local server: the postmaster, its live children and its reaped ones (ended backends); 0 if the
    server is not a local process we can read."""
    if not postmaster:
        return 0.0
    def fields(pid) -> list[str]:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields(postmaster)[11:15])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            f = fields(pid)
        except OSError:
            continue
        if int(f[1]) == postmaster:
            ticks += int(f[11]) + int(f[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _postmaster() -> int:
    from indexer.db.embedded import EmbeddedCluster
    from indexer.settings import Settings

    try:
        return int((EmbeddedCluster(Settings.from_env().indexer_home).pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def measure(tree: Path, url: str, workers: int, chunk: int | None, postmaster: int) -> tuple[float, float, float, str]:
    out = subprocess.run([sys.executable, __file__, "--child", str(tree), url, str(workers), str(chunk or 0),
                          str(postmaster)], check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), float(out[2]), out[3]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--escrows", type=int, default=479, help="synthetic escrows to replay (default 479)")
    ap.add_argument("--mix", choices=["mainnet", "adversarial"], default="mainnet", help="synthetic record mix")
    ap.add_argument("--runs", type=int, default=3, help="runs of each configuration (the median is reported, the minimum beside it)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="replay worker counts to measure (default 1 2)")
    ap.add_argument("--chunk", type=int, default=0, help="escrows per chunk (0: the module's default)")
    ap.add_argument("--perturb", type=float, default=0.0, help="share of txs to mutate (exercises rejections)")
    ap.add_argument("--baseline", help="git revision to compare with (extracted with git archive)")
    ap.add_argument("--database-url", help="server to measure (default: $DATABASE_URL, else the embedded PostgreSQL)")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from indexer.db import migrate
    from indexer.db.scratch import scratch_database
    from indexer.db.url import resolve_database_url
    from indexer.load import ingest
    from indexer import synth
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
        records = generate(seed=1, escrows=args.escrows, inferences=300, epochs=2, hosts=10, mix=args.mix)
        lines = write_ndjson(str(path), synth.perturb(records, args.perturb) if args.perturb else records)
        server = resolve_database_url(args.database_url)
        with scratch_database(server, "rb") as url:
            migrate.upgrade(url)
            t = time.perf_counter()
            ingest.ingest_paths(url, [str(path)])
            shape = f"{args.mix}, {args.perturb:.0%} perturbed" if args.perturb else args.mix
            print(f"{lines:,} records ({shape}) ingested in {time.perf_counter() - t:.1f}s")
            postmaster = 0 if args.database_url or os.environ.get("DATABASE_URL") else _postmaster()
            times: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
            digests: set[str] = set()
            for _ in range(args.runs):
                for workers in args.workers:
                    for name, tree in trees.items():
                        wall, cpu, server, digest = measure(tree, url, workers, args.chunk, postmaster)
                        times.setdefault((name, workers), []).append((wall, cpu, server))
                        digests.add(digest)
            for (name, workers), runs in times.items():
                walls, cpus, servers = zip(*runs)
                print(f"{name:9} workers={workers}: wall median {statistics.median(walls):.2f}s (min {min(walls):.2f})"
                      f"  CPU median: Python {statistics.median(cpus):.2f}s, server {statistics.median(servers):.2f}s")
            print(f"replay tables identical across all runs: {len(digests) == 1} ({', '.join(sorted(digests))})")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]) or None, int(sys.argv[6]))
        sys.exit(0)
    sys.exit(main())

"""Verification stage benchmark: what the stage costs beside the replay, on the same escrows in the same run
(bench/verify_bench.py times the verifier's session replay alone, per nonce).

    python bench/verify_stage_bench.py [--escrows 40] [--runs 3] [--database-url URL]

Every escrow is the v4.1 release fixture (34 signed diffs, 25 txs, a settlement co-signed by 4 of 5 hosts:
tests/support/verify_records.py) under its own id, so every one verifies to ``settled``. Each run, alternating so
that both sides see the same machine load, times in a fresh subprocess:

- the replay alone: ``replay_dirty`` on every escrow with the verification stage switched off (the baseline);
- the verification alone: :func:`indexer.replay.verification.verify_escrows` on the same escrows (reading the
  evidence, the three checks, the rows written), committed like a chunk;
- the replay again with the stage on, after every escrow was verified with the same evidence (what a re-replay
  caused by a tx record, or ``indexer replay --all``, costs: the stage only compares evidence digests).

The ratio verification / replay is printed (the target: at most 1, i.e. the pipeline at most twice the replay alone)
with the CPU seconds of the Python side; the verification rows must say ``settled`` for every escrow.
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


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def child(url: str, side: str) -> None:
    sys.path.insert(0, str(ROOT))
    import psycopg
    from indexer.replay import run as rr, verification

    with psycopg.connect(url) as conn:
        ids = [r[0] for r in conn.execute("SELECT escrow_id FROM rec.escrow ORDER BY 1")]
        if side != "again":
            conn.execute("TRUNCATE replay.escrow_verification")
        rr.mark_all_dirty(conn)
        conn.commit()
        t, cpu = time.perf_counter(), _cpu()
        if side == "replay":
            rr.verify_escrows = lambda conn, ids: []  # the replay alone: the stage is what is measured beside it
            rr.replay_dirty(conn, chunk=rr.CHUNK_ESCROWS)
        elif side == "again":  # the pipeline's replay, stage on, every escrow verified before with the same evidence
            rr.replay_dirty(conn, chunk=rr.CHUNK_ESCROWS)
        else:
            for start in range(0, len(ids), rr.CHUNK_ESCROWS):  # in the replay's chunks, one transaction each
                with conn.transaction():
                    verification.verify_escrows(conn, ids[start:start + rr.CHUNK_ESCROWS])
        elapsed, cpu = time.perf_counter() - t, _cpu() - cpu
        levels = dict(conn.execute("SELECT level, count(*) FROM replay.escrow_verification GROUP BY 1").fetchall())
    print(f"{elapsed:.4f} {cpu:.4f} {levels.get('settled', 0)}")


def measure(url: str, side: str) -> tuple[float, float, int]:
    out = subprocess.run([sys.executable, __file__, "--child", url, side], check=True, capture_output=True,
                         text=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--escrows", type=int, default=40, help="fixture escrows to replay and verify (default 40)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each side (the median is reported, the min beside)")
    ap.add_argument("--database-url", help="server to measure (default: $DATABASE_URL, else the embedded PostgreSQL)")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from indexer.db import migrate
    from indexer.db.scratch import scratch_database
    from indexer.db.url import resolve_database_url
    from indexer.load import ingest
    from indexer.synth import write_ndjson
    from tests.support.verify_records import epoch_params_record, records

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "verify_stage_bench.ndjson"
        recs = [epoch_params_record()]
        for n in range(args.escrows):
            recs += [r for r in records(str(1000 + n)) if r["kind"] != "epoch_params"]
        lines = write_ndjson(str(path), recs)
        with scratch_database(resolve_database_url(args.database_url), "vb") as url:
            migrate.upgrade(url)
            ingest.ingest_paths(url, [str(path)])
            print(f"{args.escrows} escrows of 34 signed diffs ({lines:,} records) ingested")
            times: dict[str, list[tuple[float, float]]] = {"replay": [], "verify": [], "again": []}
            settled = set()
            for _ in range(args.runs):
                for side in times:
                    wall, cpu, done = measure(url, side)
                    times[side].append((wall, cpu))
                    if side == "verify":
                        settled.add(done)
            medians = {}
            for side, runs in times.items():
                walls, cpus = zip(*runs)
                medians[side] = statistics.median(walls)
                label = {"replay": "replay alone", "verify": "verification", "again": "replay again"}[side]
                per_escrow = medians[side] / args.escrows * 1000
                print(f"{label:13} wall median {medians[side]:.3f}s (min {min(walls):.3f})  "
                      f"CPU median {statistics.median(cpus):.3f}s  per escrow {per_escrow:.1f} ms")
            print(f"verification / replay: {medians['verify'] / medians['replay']:.2f}x (target at most 1.00x)")
            print(f"replay again with the stage on, evidence unchanged / replay alone: "
                  f"{medians['again'] / medians['replay']:.2f}x (the digests checked, nothing re-verified)")
            print(f"escrows verified to settled: {sorted(settled)} of {args.escrows}")
    return 0 if settled == {args.escrows} else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(main())

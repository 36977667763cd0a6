"""Small-change benchmark: what one amended record costs, against the full rules run on the same database.

Loads a multi-epoch synthetic history (indexer.synth, the rules benchmark's generator), replays it and runs the full
rules stage (timed, median of --full-runs). Then, --repeat times and alternating: the real `indexer ingest` command
on an empty file (the command's start-up: interpreter, imports, connection, schema check) and on a file holding ONE
amended record (a Finish of one escrow of the chosen epoch with a new response hash; a different escrow each time).
The work of the change is the amended command's time less the empty one's run just before it (the median of the
pairs); its load, replay and rules seconds are also read from the command's own summary.

Target: the change's work <= 0.1x the full rules run.

    python bench/change_bench.py [--inferences 1000000] [--epochs 10] [--repeat 5] [--database-url URL] [--keep]
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer.db import migrate  # noqa: E402
from indexer.db.scratch import scratch_database  # noqa: E402
from indexer.db.url import resolve_database_url  # noqa: E402
from indexer.rules.run import run_rules  # noqa: E402
from synthetic_db import replayed_history, timed  # noqa: E402

PER_ESCROW = 300
_SECONDS = re.compile(r"seconds \(load / replay / rules\)\s*[│|]?\s*([\d.]+) / ([\d.]+) / ([\d.]+)")


def amendment(conn: psycopg.Connection, escrow_id: str, salt: int) -> bytes:
    """One Finish of the escrow, as stored, with a new response hash: an amendment of one tx."""
    f = conn.execute("SELECT inference_id, diff_nonce, executor_slot, input_tokens, output_tokens FROM rec.finish_tx "
                     "WHERE escrow_id = %s AND output_tokens > 0 ORDER BY inference_id LIMIT 1",
                     (escrow_id,)).fetchone()
    return orjson.dumps({"kind": "finish", "escrow_id": escrow_id, "inference_id": f[0], "diff_nonce": f[1],
                         "executor_slot": f[2], "input_tokens": f[3], "output_tokens": f[4],
                         "response_hash": f"{salt:032x}{f[0]:032x}"}) + b"\n"


def run_command(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} failed ({out.returncode}): {out.stderr or out.stdout}")
    return seconds, out.stdout + out.stderr  # the summary table goes to stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inferences", type=int, default=1_000_000, help="synthetic inferences (default 1,000,000)")
    ap.add_argument("--epochs", type=int, default=10, help="epochs of history (default 10)")
    ap.add_argument("--repeat", type=int, default=5, help="pairs of (empty, amended) ingest commands (default 5)")
    ap.add_argument("--full-runs", type=int, default=2, help="full rules runs timed, median taken (default 2)")
    ap.add_argument("--database-url", help="server to measure (default: $DATABASE_URL, else the embedded PostgreSQL)")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark database")
    args = ap.parse_args()
    server = resolve_database_url(args.database_url)
    with scratch_database(server, "cbench", keep=args.keep) as url, tempfile.TemporaryDirectory() as tmp:
        migrate.upgrade(url)
        escrows = max(1, args.inferences // (PER_ESCROW * args.epochs))
        print(replayed_history(url, Path(tmp) / "history.ndjson", escrows=escrows, inferences=PER_ESCROW,
                               epochs=args.epochs))
        with psycopg.connect(url) as conn:
            fulls = [timed(lambda: run_rules(conn, (0, 2**62))) for _ in range(args.full_runs)]
            epochs = [r[0] for r in conn.execute("SELECT DISTINCT epoch_index FROM rec.escrow ORDER BY 1")]
            epoch = epochs[len(epochs) // 2]
            picked = [r[0] for r in conn.execute("SELECT escrow_id FROM rec.escrow WHERE epoch_index = %s "
                                                 "ORDER BY escrow_id LIMIT %s", (epoch, args.repeat))]
            files = []
            for i, escrow_id in enumerate(picked * (args.repeat // len(picked) + 1)):
                if i == args.repeat:
                    break
                files.append(Path(tmp) / f"amend{i}.ndjson")
                files[-1].write_bytes(amendment(conn, escrow_id, i + 1))
        full = statistics.median(fulls)
        empty = Path(tmp) / "empty.ndjson"
        empty.write_bytes(b"")
        indexer = [sys.executable, "-m", "indexer", "--database-url", url, "ingest", "--no-progress"]
        startups, changes, parts = [], [], []
        for file in files:  # alternated, so both see the same load on a shared machine
            startups.append(run_command(indexer + [str(empty)])[0])
            seconds, out = run_command(indexer + [str(file)])
            changes.append(seconds)
            found = _SECONDS.search(out)
            if found is None or "amended" not in out:
                raise SystemExit(f"no summary in the ingest's output:\n{out}")
            parts.append(tuple(float(x) for x in found.groups()))
        with psycopg.connect(url) as conn:
            amended = conn.execute("SELECT count(*) FROM rec.amendment").fetchone()[0]
    start, change = statistics.median(startups), statistics.median(changes)
    work = statistics.median(c - s for c, s in zip(changes, startups))  # each pair ran back to back
    load_s, replay_s, rules_s = (statistics.median(p[i] for p in parts) for i in range(3))
    print(f"full rules run, {args.epochs} epochs (median of {len(fulls)})       : {full:7.3f}s")
    print(f"indexer ingest, empty file (start-up), median of {len(startups)} : {start:7.3f}s")
    print(f"indexer ingest, one amended Finish, median of {len(changes)}    : {change:7.3f}s  "
          f"(its summary: load {load_s:.3f}s, replay {replay_s:.3f}s, rules {rules_s:.3f}s)")
    print(f"change work beyond start-up (median of the pairs) : {work:7.3f}s = {work / full:.3f}x the full rules run "
          f"(target <= 0.1x); load + replay + rules by the command's own clock "
          f"{(load_s + replay_s + rules_s) / full:.3f}x; rules alone {rules_s / full:.3f}x; "
          f"{amended} amendment(s) recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Rules-stage benchmark on a ~1,000,000-inference database over ten epochs.

Baseline, measured in the same run: one `CREATE TABLE … AS SELECT * FROM replay.inference`. Targets: full rules
stage ≤ 3× the baseline; re-evaluating one dirty epoch of ten ≤ 0.1× the full run (the epoch dirtied as epochs are
in service, by late records in some of its escrows; a forced whole-epoch re-evaluation is printed beside it);
api.disputable_penalties filtered to one epoch < 50 ms.

    python bench/rules_bench.py [--inferences 1000000] [--database-url URL] [--keep]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer.db import migrate  # noqa: E402
from indexer.db.scratch import scratch_database  # noqa: E402
from indexer.db.url import resolve_database_url  # noqa: E402
from indexer.load.ingest import ingest_paths  # noqa: E402
from indexer.replay.run import replay_dirty  # noqa: E402
from indexer.rules.run import run_rules  # noqa: E402
from synthetic_db import replayed_history, timed  # noqa: E402

EPOCHS, PER_ESCROW = 10, 300


def late_records(conn: psycopg.Connection, url: str, epoch: int, share: float = 0.1) -> int:
    """The way an epoch becomes dirty in service: late records. Amend one Finish (a re-fetched response hash) in
    `share` of the epoch's escrows, then load and replay them (untimed): the rules run that follows is measured."""
    escrows = [r[0] for r in conn.execute("SELECT escrow_id FROM rec.escrow WHERE epoch_index = %s ORDER BY 1",
                                          (epoch,))]
    picked = escrows[:max(1, round(len(escrows) * share))]
    records = []
    for escrow_id in picked:
        f = conn.execute("SELECT inference_id, diff_nonce, executor_slot, input_tokens, output_tokens FROM rec.finish_tx "
                         "WHERE escrow_id = %s AND output_tokens > 0 ORDER BY inference_id LIMIT 1",
                         (escrow_id,)).fetchone()
        records.append({"kind": "finish", "escrow_id": escrow_id, "inference_id": f[0], "diff_nonce": f[1],
                        "executor_slot": f[2], "input_tokens": f[3], "output_tokens": f[4],
                        "response_hash": f"{f[0]:064x}"})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "late.ndjson"
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
        ingest_paths(url, [str(path)])
    replay_dirty(conn)
    return len(picked)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inferences", type=int, default=1_000_000, help="synthetic inferences (default 1,000,000)")
    ap.add_argument("--database-url", help="server to measure (default: $DATABASE_URL, else the embedded PostgreSQL)")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark database")
    ap.add_argument("--mix", choices=["mainnet", "adversarial"], default="mainnet",
                    help="inference mix of the synthetic log (indexer.synth.MIXES)")
    args = ap.parse_args()
    server = resolve_database_url(args.database_url)
    with scratch_database(server, "rbench", keep=args.keep) as url:
        migrate.upgrade(url)
        escrows = max(1, args.inferences // (PER_ESCROW * EPOCHS))
        with tempfile.TemporaryDirectory() as tmp:
            print(replayed_history(url, Path(tmp) / "rules.ndjson", escrows=escrows, inferences=PER_ESCROW,
                                   epochs=EPOCHS, mix=args.mix), f"{args.mix} mix")
        with psycopg.connect(url) as conn:
            conn.execute("DROP TABLE IF EXISTS bench_ctas")
            conn.commit()
            base = timed(lambda: (conn.execute("CREATE TABLE bench_ctas AS SELECT * FROM replay.inference"),
                                  conn.commit()))
            conn.execute("DROP TABLE bench_ctas")
            conn.commit()
            full = timed(lambda: run_rules(conn, (0, 2**62)))
            epochs = [r[0] for r in conn.execute("SELECT DISTINCT epoch_index FROM rec.escrow ORDER BY 1")]
            one = timed(lambda: run_rules(conn, (epochs[3], epochs[3])))
            again = timed(lambda: run_rules(conn))
            amended = late_records(conn, url, epochs[3])
            late = timed(lambda: run_rules(conn))
            samples = []
            for _ in range(7):
                samples.append(timed(lambda: conn.execute(
                    "SELECT * FROM api.disputable_penalties WHERE epoch_index = %s", (epochs[5],)).fetchall()))
            found = conn.execute("SELECT count(*) FROM api.disputable_penalties").fetchone()[0]
        print(f"baseline  CREATE TABLE AS SELECT * FROM inferences : {base:7.2f}s")
        print(f"rules     full stage, {EPOCHS} epochs                     : {full:7.2f}s  = {full / base:.2f}x baseline "
              f"(target <= 3x); {found:,} disputable penalties")
        print(f"rules     one dirty epoch of {EPOCHS} (late records)      : {late:7.2f}s  = {late / full:.3f}x full "
              f"(target <= 0.1x); {amended} of its escrows amended")
        print(f"rules     one epoch of {EPOCHS} re-evaluated whole          : {one:7.2f}s  = {one / full:.3f}x full "
              f"(`indexer rules --epochs`: every escrow recomputed)")
        print(f"rules     nothing dirty (re-run)                    : {again * 1000:7.1f}ms")
        print(f"query     api.disputable_penalties, one epoch       : {statistics.median(samples) * 1000:7.1f}ms "
              f"median of 7 (target < 50 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

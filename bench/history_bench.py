"""History benchmark: does a poll cycle cost more when the database holds a long history?

One devnet (its own process, advanced to its last epoch) is polled by one full cycle (`poll_once`: fetch, load,
replay, rules) into three kinds of database, each a fresh copy of a prepared template, alternated --repeat times:

* empty: migrated, nothing else;
* history: --history-records records of epochs older than the devnet's, with what a poller leaves of them (replay
  rows, rule findings, final epoch states, each escrow's final cursor);
* archived: the same history after `indexer archive` moved it out (its partitions dropped, its rows deleted).

The history is made fast: one template epoch goes through the real path (indexer.synth → ingest → replay → rules),
then its rows are copied server-side (INSERT … SELECT per table) into as many older epochs as the count needs, with
the escrow ids renamed. Prints the median cycle of each kind and the ratios to the empty one (target: within 10%).

    python bench/history_bench.py [--history-records 10000000] [--repeat 3] [--no-archived] [--database-url URL]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from indexer.archive import archive  # noqa: E402
from indexer.db import migrate  # noqa: E402
from indexer.db.scratch import with_database  # noqa: E402
from indexer.db.url import resolve_database_url  # noqa: E402
from indexer.load.ingest import ingest_paths  # noqa: E402
from indexer.load.partitions import ensure_epochs  # noqa: E402
from indexer.poller import poll_once  # noqa: E402
from indexer.replay.run import replay_dirty  # noqa: E402
from indexer.rules.run import run_rules  # noqa: E402
from indexer.synth import generate, write_ndjson  # noqa: E402

FIRST_DEVNET_EPOCH = 408  # indexer.devnet.scenario.ScenarioConfig.first_epoch
ID_STRIDE = 100_000       # indexer.synth names escrow e of epoch E  E * 100000 + e
SKIP = {"rec.source", "rec.quarantine", "rec.amendment", "replay.dirty_escrow", "rules.dirty_escrow",
        "rules.dirty_epoch", "rules.run"}
_TABLES = """
SELECT c.table_schema || '.' || c.table_name,
       array_agg(c.column_name::text ORDER BY c.ordinal_position),
       bool_or(c.column_name = 'epoch_index'), bool_or(c.column_name = 'escrow_id')
FROM information_schema.columns c
JOIN pg_class k ON k.relname = c.table_name AND k.relnamespace = c.table_schema::regnamespace
WHERE c.table_schema IN ('rec', 'replay', 'rules') AND k.relkind IN ('r', 'p') AND NOT k.relispartition
  AND c.is_generated = 'NEVER' AND c.is_identity = 'NO' AND coalesce(c.column_default, '') NOT LIKE 'nextval%%'
GROUP BY 1 HAVING bool_or(c.column_name IN ('epoch_index', 'escrow_id')) ORDER BY 1
"""


class Devnet:
    def __init__(self, args) -> None:
        cmd = [sys.executable, "-m", "indexer.devnet", "--seed", "2078", "--epochs", str(args.epochs),
               "--escrows-per-epoch", str(args.escrows_per_epoch),
               "--inferences-per-escrow", str(args.inferences_per_escrow)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        info = json.loads(self.proc.stdout.readline())
        self.chain, self.rpc = info["chain_rest_url"], info["rpc_url"]
        base = self.chain.rsplit("/chain-api", 1)[0]
        import httpx

        state = httpx.get(f"{base}/devnet/state", timeout=60).json()
        while state["current_epoch"] < state["last_epoch"]:
            httpx.post(f"{base}/devnet/advance", timeout=60).raise_for_status()
            state = httpx.get(f"{base}/devnet/state", timeout=60).json()
        self.txs = state["txs"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def create(server: str, name: str, template: str | None = None) -> str:
    clause = f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else ""
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{clause}')
    return with_database(server, name)


def drop(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_history(url: str, records: int, template_records: int, tmp: Path) -> tuple[int, list[int]]:
    """Load one template epoch for real, then copy it into older epochs until `records` records are stored.
    Returns the records stored and the epochs."""
    inferences = 60
    escrows = max(1, template_records // (inferences * 3))  # ~3.3 records an inference (indexer.synth)
    top = FIRST_DEVNET_EPOCH - 1
    path = tmp / "template.ndjson"
    per_epoch = write_ndjson(str(path), generate(seed=5, escrows=escrows, inferences=inferences, epochs=1,
                                                 first_epoch=top))
    ingest_paths(url, [str(path)])
    with psycopg.connect(url) as conn:
        replay_dirty(conn)
        run_rules(conn)
        epochs = [top - k for k in range(max(1, -(-records // per_epoch)))]
        ensure_epochs(conn, epochs)
        tables = conn.execute(_TABLES).fetchall()
        for epoch in epochs[1:]:
            with conn.transaction():
                for table, columns, has_epoch, has_escrow in tables:
                    if table in SKIP:
                        continue
                    values = [f"(escrow_id::bigint + {(epoch - top) * ID_STRIDE})::text" if c == "escrow_id"
                              else f"{epoch}::bigint" if c == "epoch_index" else c for c in columns]
                    where = (f"epoch_index = {top}" if has_epoch else
                             f"escrow_id IN (SELECT escrow_id FROM rec.escrow WHERE epoch_index = {top})")
                    conn.execute(f"INSERT INTO {table} ({', '.join(columns)}) "
                                 f"SELECT {', '.join(values)} FROM {table} WHERE {where}")
        # what a poller leaves of an epoch it has seen through: its final state, each escrow's final cursor
        conn.execute("INSERT INTO net.epoch_state (epoch_index, state, escrows, escrows_final, final_at) "
                      "SELECT epoch_index, 'final', count(*), count(*), now() FROM rec.escrow GROUP BY 1")
        conn.execute("INSERT INTO net.cursor (source, cursor, last_success_at) "
                     "SELECT 'escrow-final:' || escrow_id, '0', now() FROM rec.escrow")
        conn.execute("DELETE FROM rules.dirty_epoch; DELETE FROM rules.dirty_escrow; DELETE FROM replay.dirty_escrow")
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
        stored = sum(conn.execute(f"SELECT count(*) FROM rec.{t}").fetchone()[0] for t in
                     ("start_tx", "confirm_start_tx", "finish_tx", "validation_tx", "validation_vote_tx",
                      "timeout_tx", "error_miss_tx", "host_stats", "escrow"))
    return stored, epochs


def poll(server: str, template: str, devnet: Devnet) -> float:
    name = f"hbench_run_{uuid.uuid4().hex[:8]}"
    url = create(server, name, template)
    try:
        start = time.perf_counter()
        s = poll_once(url, devnet.chain, devnet.rpc, private_hosts=True)
        seconds = time.perf_counter() - start
        if s.txs != devnet.txs:
            raise SystemExit(f"polled {s.txs} txs, the devnet has {devnet.txs}")
        return seconds
    finally:
        drop(server, name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--history-records", type=int, default=10_000_000, help="records of older epochs (default 10M)")
    ap.add_argument("--template-records", type=int, default=300_000,
                    help="records of the one epoch loaded for real and copied (default 300,000)")
    ap.add_argument("--repeat", type=int, default=3, help="cycles of each kind, alternated (default 3)")
    ap.add_argument("--no-archived", action="store_true", help="leave out the archived history")
    ap.add_argument("--epochs", type=int, default=3, help="devnet epochs (default 3)")
    ap.add_argument("--escrows-per-epoch", type=int, default=42, help="devnet escrows per epoch (default 42)")
    ap.add_argument("--inferences-per-escrow", type=int, default=200, help="devnet inferences per escrow")
    ap.add_argument("--database-url", help="server to measure (default: $DATABASE_URL, else the embedded PostgreSQL)")
    ap.add_argument("--keep", action="store_true", help="keep the three template databases (their tag is printed)")
    ap.add_argument("--reuse", metavar="TAG", help="poll copies of the templates a --keep run left (no new history)")
    args = ap.parse_args()
    server = resolve_database_url(args.database_url)
    tag = args.reuse or uuid.uuid4().hex[:8]
    templates = {"empty": f"hbench_empty_{tag}", "history": f"hbench_history_{tag}"}
    if not args.no_archived:
        templates["archived"] = f"hbench_archived_{tag}"
    devnet = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for kind, name in templates.items():
                if args.reuse:  # brought to this code's schema
                    migrate.upgrade(with_database(server, name))
                    continue
                url = create(server, name, templates["history"] if kind == "archived" else None)
                if kind == "empty":
                    migrate.upgrade(url)
                elif kind == "history":
                    migrate.upgrade(url)
                    t0 = time.perf_counter()
                    stored, epochs = make_history(url, args.history_records, args.template_records, Path(tmp))
                    print(f"history: {stored:,} records in epochs {epochs[-1]}..{epochs[0]} "
                          f"(made in {time.perf_counter() - t0:.0f}s)")
                else:
                    t0 = time.perf_counter()
                    done = archive(url, FIRST_DEVNET_EPOCH, str(Path(tmp) / "archive"))
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute("VACUUM ANALYZE")
                    print(f"archived: {len(done.dropped)} epochs, {done.records:,} records "
                          f"(in {time.perf_counter() - t0:.0f}s)")
            devnet = Devnet(args)
            print(f"devnet: {args.epochs} epochs of {args.escrows_per_epoch} escrows, {devnet.txs:,} txs")
            times: dict[str, list[float]] = {kind: [] for kind in templates}
            for _ in range(args.repeat):
                for kind, name in templates.items():
                    times[kind].append(poll(server, name, devnet))
    finally:
        if devnet is not None:
            devnet.close()
        if args.keep or args.reuse:
            print(f"templates kept: --reuse {tag}")
        else:
            for name in templates.values():
                drop(server, name)
    base = statistics.median(times["empty"])
    for kind, seconds in times.items():
        median = statistics.median(seconds)
        print(f"poll cycle, {kind:8s} history: median {median:6.2f}s ({', '.join(f'{s:.2f}' for s in seconds)}) "
              f"= {median / base:.3f}x the empty one (target within 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

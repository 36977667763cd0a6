"""Ingest + replay benchmark against the same-run baseline: raw COPY of the file's lines into an unlogged
one-column jsonb table, timed before and after the ingest (their mean is the baseline). Prints throughput, both
ratios to the baseline (load + replay, and the whole `indexer ingest` command with its rules and start-up; target
≥ 0.5×) and the ingest's peak RSS.

The same records in two orders (--order): `escrow`, every escrow's records together (the synthetic generator's
own order), and `interleaved`, the order a block-ordered stream of the network delivers: about a hundred escrows
open at once, each escrow's records in diff order, a few at a time from each. A generated file has ten epochs of
about a hundred escrows (--epochs).
With both, the orders alternate within each repeat, so a machine drifting over the run weighs on neither.

    python bench/ingest_bench.py [--records 1000000] [--repeat 3] [--order escrow|interleaved|both] [--pg15]
                                 [--database-url URL] [--file F] [--keep] [--floor] [--scale-file F [--scale-rounds N]]

--pg15 also measures a stock PostgreSQL 15 with default settings, started by the bench in a temp dir
(bench/stock_postgres.py), with the same file and the same side-by-side baseline.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer.db import migrate  # noqa: E402
from indexer.db.scratch import scratch_database  # noqa: E402
from indexer.db.url import resolve_database_url  # noqa: E402
from indexer.load.partitions import ensure_epochs  # noqa: E402
from indexer.synth import generate, write_ndjson  # noqa: E402
from cpu import postgres_cpu  # noqa: E402
from stock_postgres import DEFAULT_BINDIR, StockServerMissing, stock_postgres  # noqa: E402


RECORDS_PER_INFERENCE, RECORDS_PER_ESCROW = 3.35, 17  # measured averages of the synthetic generator
EPOCHS, OPEN_AT_ONCE = 10, 100


def make_file(path: Path, records: int, mix: str, order: str = "escrow", epochs: int = EPOCHS) -> int:
    """Write about `records` synthetic records to `path` in `order`; the number written. Both orders hold the same
    records: `epochs` epochs of about OPEN_AT_ONCE escrows each (their size set by `records`: ~300 inferences each at
    1M records), so that in the interleaved order about that many are open at once whatever the size, and the two
    orders differ by their order alone."""
    per_escrow = records / epochs / OPEN_AT_ONCE
    inferences = max(10, round((per_escrow - RECORDS_PER_ESCROW) / RECORDS_PER_INFERENCE))
    escrows = max(1, round(records / epochs / (inferences * RECORDS_PER_INFERENCE + RECORDS_PER_ESCROW)))
    generated = generate(seed=1, escrows=escrows, inferences=inferences, epochs=epochs, hosts=10, mix=mix)
    return write_ndjson(str(path), interleave(generated, OPEN_AT_ONCE) if order == "interleaved" else generated)


def make_file_apart(path: Path, records: int, mix: str, order: str = "escrow", epochs: int = EPOCHS) -> int:
    """make_file in a forked child process. The interleaved order holds every open escrow's records at once (at 10M
    records, hundreds of MB); made in this process, that stays in it, and every ingest the bench starts afterwards
    reports it as its own peak RSS: the kernel carries the forking process's high-water RSS into the child's
    maximum across exec (ru_maxrss 470 MB for ingests whose processes, sampled, never passed 192 MB)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as child:
        return child.submit(make_file, path, records, mix, order, epochs).result()


def _diff_order(rec: dict) -> tuple[int, int]:
    """An escrow's records as its diffs deliver them: the escrow first, its txs by nonce, its settlement last."""
    if rec["kind"] == "escrow":
        return 0, 0
    return (1, rec["diff_nonce"]) if "diff_nonce" in rec else (2, 0)


def _groups(records):
    """The generator's records as (escrow_id or None, [records]): each escrow with its own records, or a run of
    epoch-level records (None)."""
    key, group = None, []
    for rec in records:
        escrow = rec.get("escrow_id")
        if rec["kind"] == "escrow" or (escrow is None) != (key is None):
            if group:
                yield key, group
            key, group = escrow, []
        group.append(rec)
    if group:
        yield key, group


def interleave(records, open_at_once: int, seed: int = 1):
    """The records of escrow-contiguous `records` (indexer.synth.generate) in a block-ordered stream's order: up to
    `open_at_once` escrows open, each emitting its next 1-8 records (in diff order) in turn at random; an escrow
    that ends makes room for the next one, whose epoch's records come when the first escrow of that epoch opens.
    The same records, each escrow's in diff order; only the order across escrows changes."""
    rng, groups, open_ = random.Random(seed), _groups(records), []
    pending = next(groups, None)

    def refill():
        nonlocal pending
        while pending is not None and len(open_) < open_at_once:
            escrow, group = pending
            pending = next(groups, None)
            if escrow is None:
                yield from group  # the epoch's header records, before any of its escrows
            else:
                open_.append(iter(sorted(group, key=_diff_order)))

    yield from refill()
    while open_:
        i = rng.randrange(len(open_))
        for _ in range(rng.randint(1, 8)):
            rec = next(open_[i], None)
            if rec is None:
                open_[i] = open_[-1]
                open_.pop()
                yield from refill()
                break
            yield rec


def baseline_copy(url: str, path: Path) -> tuple[float, float]:
    """(seconds, CPU seconds of the server) of a raw COPY of the file's lines into an unlogged jsonb table."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_baseline")
        conn.execute("CREATE UNLOGGED TABLE bench_baseline (doc jsonb)")
        server = postgres_cpu(url)
        start = time.perf_counter()
        with conn.cursor().copy("COPY bench_baseline (doc) FROM STDIN") as cp, open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                cp.write(chunk.replace(b"\\", b"\\\\"))
        elapsed = time.perf_counter() - start
        server = postgres_cpu(url) - server
        conn.execute("DROP TABLE bench_baseline")
    return elapsed, server


def timed_ingest(url: str, path: Path) -> tuple[float, int, tuple | None, float, float]:
    """Run `indexer ingest`; (seconds, peak RSS in kB of that process and the workers it waited for, stages,
    CPU seconds of that process with its workers, CPU seconds of the server)."""
    with tempfile.TemporaryFile() as out:
        server = postgres_cpu(url)
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "indexer", "--database-url", url, "ingest", str(path),
                                 "--no-progress"], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "COLUMNS": "200"})
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not every child's of the bench
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - start
        server = postgres_cpu(url) - server
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise SystemExit(f"indexer ingest failed ({proc.returncode}):\n{text[-3000:]}")
    stages = re.search(r"seconds \(load / replay / rules\)\s*│\s*([0-9.]+) / ([0-9.]+) / ([0-9.]+)", text)
    return (elapsed, usage.ru_maxrss, tuple(float(x) for x in stages.groups()) if stages else None,
            usage.ru_utime + usage.ru_stime, server)


def measure(server: str, path: Path, lines: int, keep: bool, floor: bool = False) -> dict:
    """One same-run triple on `server`: raw COPY baseline, `indexer ingest` of the same file in a fresh database,
    then the baseline again in another fresh database; the ingest is compared with the mean of the two baselines,
    so a machine that drifts faster or slower over the minute does not weigh on one side only (the baseline alone
    scatters by ±15 % from one run to the next on this shared VM). With `floor`, then the written rows alone
    (floor_copy)."""
    with scratch_database(server, "bench", keep=keep) as url:
        migrate.upgrade(url)
        settle(url)
        before, before_cpu = baseline_copy(url, path)
        settle(url)
        ingest_s, peak_kb, stages, client_cpu, server_cpu = timed_ingest(url, path)
        with psycopg.connect(url) as c:
            inferences = c.execute("SELECT count(*) FROM replay.inference").fetchone()[0]
        floors = floor_copy(server, url) if floor else None
    with scratch_database(server, "bench_after") as url:
        settle(url)
        after, after_cpu = baseline_copy(url, path)
    load_s, replay_s, rules_s = stages or (ingest_s, 0.0, 0.0)
    return dict(base=(before + after) / 2, bases=(before, after), base_cpu=(before_cpu + after_cpu) / 2,
                client_cpu=client_cpu, server_cpu=server_cpu, ingest=ingest_s, peak_kb=peak_kb, load=load_s,
                replay=replay_s, rules=rules_s, inferences=inferences, lines=lines, floor=floors)


def floor_copy(server: str, loaded_url: str) -> dict[str, tuple[float, float]]:
    """What writing the ingest's own rows costs with no typing and no replay: every row the ingest wrote to the
    rec and replay tables, taken out with COPY TO and written into a fresh database's same (partitioned, indexed,
    logged) tables with one COPY per table, in one transaction. {schema: (seconds, server CPU seconds)}: the least
    any ingest into this schema can spend on the server, beside the baseline's."""
    with tempfile.TemporaryDirectory() as tmp, psycopg.connect(loaded_url) as src:
        tables = [r[0] for r in src.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname IN ('rec', 'replay') AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "AND c.relname <> 'dirty_escrow' ORDER BY n.nspname, c.relname <> 'source', c.relname")]
        epochs = [r[0] for r in src.execute("SELECT DISTINCT epoch_index FROM rec.escrow WHERE epoch_index IS NOT NULL")]
        for table in tables:
            with open(Path(tmp) / table, "wb") as out, src.cursor().copy(f"COPY (SELECT * FROM {table}) TO STDOUT") as cp:
                for chunk in cp:
                    out.write(chunk)
        with scratch_database(server, "bench_floor") as url:
            migrate.upgrade(url)
            with psycopg.connect(url) as dst:
                ensure_epochs(dst, epochs)
            settle(url)
            took: dict[str, tuple[float, float]] = {}
            with psycopg.connect(url) as dst:
                for schema in ("rec", "replay"):
                    server_cpu, start = postgres_cpu(url), time.perf_counter()
                    for table in (t for t in tables if t.startswith(schema + ".")):
                        with dst.cursor().copy(f"COPY {table} FROM STDIN") as cp, open(Path(tmp) / table, "rb") as fh:
                            while chunk := fh.read(1 << 20):
                                cp.write(chunk)
                    dst.commit()
                    took[schema] = (time.perf_counter() - start, postgres_cpu(url) - server_cpu)
    return took


def wal_position(url: str) -> tuple[int, int] | None:
    """(WAL bytes written so far, checkpoints started so far) of the server, or None where they are not readable.
    A load that crosses a checkpoint writes a full image of every existing page it touches next (full_page_writes),
    so WAL per record, and time, jump where a load is long enough to cross one: the scale check shows both."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            stats = ("SELECT num_timed + num_requested FROM pg_stat_checkpointer"  # PostgreSQL 17 moved them here
                     if conn.info.server_version >= 170000 else
                     "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")
            wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()[0]
            return wal, conn.execute(stats).fetchone()[0]
    except psycopg.Error:
        return None


def settle(url: str) -> None:
    """Start each timed side from a quiet disk: the server's dirty buffers written (CHECKPOINT) and the kernel's
    dirty pages flushed (sync). Otherwise the write-back of what came before (a 1.9 GB baseline table, a freshly
    generated file) runs during the next side and is charged to it: at 10M records it added a quarter to the load."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:  # a --database-url without pg_checkpoint: the sync still helps
            pass
    os.sync()


def report(label: str, runs: list[dict]) -> None:
    print(f"-- {label}")
    for r in runs:
        core = r["load"] + r["replay"]
        print(f"baseline  raw COPY into unlogged jsonb : {r['base']:7.2f}s  {r['lines'] / r['base']:10,.0f} lines/s "
              f"(mean of {r['bases'][0]:.2f}s before the ingest and {r['bases'][1]:.2f}s after it)")
        print(f"indexer   load + replay                : {core:7.2f}s  {r['lines'] / core:10,.0f} lines/s "
              f"(load {r['load']:.2f}s, replay {r['replay']:.2f}s; {r['inferences']:,} inferences)")
        print(f"          whole `indexer ingest` command : {r['ingest']:7.2f}s  (+ rules {r['rules']:.2f}s, start-up)")
        print(f"ratio     load + replay / baseline     : {r['base'] / core:.2f}x  (target >= 0.5x); whole command "
              f"{r['base'] / r['ingest']:.2f}x")
        print(f"peak RSS  of the ingest process        : {r['peak_kb'] / 1024:.0f} MB  (target < 300 MB)")
        print(f"cpu       baseline: server {r['base_cpu']:.2f}s (mean); whole ingest command: its process and workers "
              f"{r['client_cpu']:.2f}s, server {r['server_cpu']:.2f}s (both cores: "
              f"{(r['client_cpu'] + r['server_cpu']) / r['ingest'] / 2:.0%} busy)")
        if r["floor"]:
            (rec_s, rec_cpu), (rep_s, rep_cpu) = r["floor"]["rec"], r["floor"]["replay"]
            print(f"floor     the same rows, one COPY a table : {rec_s + rep_s:7.2f}s  (rec {rec_s:.2f}s, replay "
                  f"{rep_s:.2f}s; server CPU {rec_cpu + rep_cpu:.2f}s): {r['base'] / (rec_s + rep_s):.2f}x the "
                  f"baseline with no typing and no replay at all")
    if len(runs) > 1:
        ratios = sorted(r["base"] / (r["load"] + r["replay"]) for r in runs)
        whole = sorted(r["base"] / r["ingest"] for r in runs)
        print(f"ratios of the {len(runs)} same-run pairs: {', '.join(f'{x:.2f}x' for x in ratios)}; "
              f"median {statistics.median(ratios):.2f}x; whole command {', '.join(f'{x:.2f}x' for x in whole)}; "
              f"median {statistics.median(whole):.2f}x")


def summary(runs: dict[str, list[dict]]) -> None:
    """One line per order: the median of each ratio over its same-run pairs."""
    for order, rs in runs.items():
        core = statistics.median(r["base"] / (r["load"] + r["replay"]) for r in rs)
        whole = statistics.median(r["base"] / r["ingest"] for r in rs)
        print(f"order     {order:<11}: load + replay {core:.2f}x, whole command {whole:.2f}x the baseline "
              f"(medians of {len(rs)}; target >= 0.5x); peak RSS {max(r['peak_kb'] for r in rs) / 1024:.0f} MB")


def scale_check(server: str, small: Path, small_lines: int, big: Path, big_lines: int, rounds: int = 1) -> None:
    """Linearity: each file loaded alone (no baseline beside it: at 10M records the baseline's 2 GB of writes just
    before slowed the disk for the ingest that followed, by a third), in a fresh database from a quiet disk. The
    small file is loaded twice before each big load and twice after the last: one ~7 s load moves by ±20 % on a
    shared VM, which alone would decide a ±10 % test, so the small side is a median. Small loads on both sides of
    every big one keep a machine that drifts faster or slower over those minutes from weighing on one side only.
    The same 10M load took 41 to 74 s within one hour here, and 60 to 99 s within another: ``rounds`` > 1 loads the
    big file that many times and compares the medians."""
    order = ([(small, small_lines)] * 2 + [(big, big_lines)]) * rounds + [(small, small_lines)] * 2
    smalls, bigs = [], []
    for path, lines in order:
        with scratch_database(server, "bench_scale") as url:
            migrate.upgrade(url)
            settle(url)
            before = wal_position(url)
            ingest_s, peak_kb, stages, _, _ = timed_ingest(url, path)
            after = wal_position(url)
        load_s, replay_s, _ = stages or (ingest_s, 0.0, 0.0)
        wal_bytes = after[0] - before[0] if before and after else None
        (bigs if path == big else smalls).append((load_s + replay_s, peak_kb, wal_bytes))
        wal = (f"; WAL {wal_bytes / 1e6:,.0f} MB, {after[1] - before[1]} checkpoint(s) during it"
               if wal_bytes is not None else "")
        print(f"alone     {lines:>12,} records: load + replay {load_s + replay_s:8.2f}s (load {load_s:.2f}s, "
              f"replay {replay_s:.2f}s); peak RSS {peak_kb / 1024:.0f} MB{wal}")
    small_s, small_kb = statistics.median(t for t, _, _ in smalls), max(kb for _, kb, _ in smalls)
    big_s, big_kb = statistics.median(t for t, _, _ in bigs), max(kb for _, kb, _ in bigs)
    expected = small_s * big_lines / small_lines
    small_wal, big_wal = [w for _, _, w in smalls if w], [w for _, _, w in bigs if w]
    wal = (f"; WAL a record {statistics.median(big_wal) / big_lines / (statistics.median(small_wal) / small_lines):.2f}x"
           f" the small loads'" if big_wal and small_wal else "")
    each = f" (each: {', '.join(f'{t / expected:.3f}x' for t, _, _ in bigs)})" if len(bigs) > 1 else ""
    print(f"linearity {big_s:.2f}s against {big_lines / small_lines:.2f} x {small_s:.2f}s = {expected:.2f}s: "
          f"{big_s / expected:.3f}x{each} (target within 10%); peak RSS {small_kb / 1024:.0f} -> "
          f"{big_kb / 1024:.0f} MB{wal}")


def count_lines(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b""))


def order_file(path: Path, order: str, orders: list[str]) -> Path:
    """Where `order`'s file is: `path` for the first order asked, beside it with the order in its name for another."""
    return path if order == orders[0] else path.with_name(f"{path.stem}-{order}{path.suffix}")


def main() -> int:
    ap = argparse.ArgumentParser(description="NDJSON ingest + replay throughput against raw COPY of the same lines "
                                             "into an unlogged jsonb table, measured side by side in one run.")
    ap.add_argument("--records", type=int, default=1_000_000, help="about how many records to generate")
    ap.add_argument("--file", type=Path, help="use this NDJSON file (generated there first if it does not exist) "
                                              "instead of a temporary one; with --order both, the second order's "
                                              "file is beside it, named with the order (F-interleaved.ndjson)")
    ap.add_argument("--order", choices=["escrow", "interleaved", "both"], default="both",
                    help="record order of a generated file: every escrow's records together (escrow), or block-"
                         f"ordered with about {OPEN_AT_ONCE} escrows open at once (interleaved); both (the default) "
                         "measures each, alternating within each repeat; the same records in either order")
    ap.add_argument("--epochs", type=int, default=EPOCHS,
                    help=f"epochs of a generated file, each of about {OPEN_AT_ONCE} escrows (default {EPOCHS})")
    ap.add_argument("--database-url", help="server to measure (default: DATABASE_URL, else the embedded cluster)")
    ap.add_argument("--pg15", action="store_true",
                    help="also measure a stock PostgreSQL server with default settings that the bench starts itself "
                         "in a temp dir (initdb + pg_ctl from --pg15-bindir; skipped with a message when absent)")
    ap.add_argument("--pg15-bindir", type=Path, default=DEFAULT_BINDIR,
                    help=f"PostgreSQL binaries for --pg15 (default {DEFAULT_BINDIR})")
    ap.add_argument("--only-pg15", action="store_true", help="with --pg15: skip the default server")
    ap.add_argument("--repeat", type=int, default=1, help="same-run pairs per server (the machine is shared: "
                                                           "repeat and read the median ratio)")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark database")
    ap.add_argument("--mix", choices=["mainnet", "adversarial"], default="mainnet", help="synthetic record mix")
    ap.add_argument("--floor", action="store_true",
                    help="also time writing the ingest's own rows alone (one COPY per rec/replay table into a fresh "
                         "database): the server's share no typing or replay code can avoid")
    ap.add_argument("--scale-file", type=Path,
                    help="also check linearity: load this file (generated there first with 10x --records if it does "
                         "not exist, in the first order asked) and the main file each alone, and compare their times "
                         "and peak RSS")
    ap.add_argument("--scale-rounds", type=int, default=1,
                    help="with --scale-file: load the big file this many times (each after two small loads) and "
                         "compare the medians (default 1)")
    args = ap.parse_args()
    orders = ["escrow", "interleaved"] if args.order == "both" else [args.order]
    with tempfile.TemporaryDirectory() as tmp:
        files: dict[str, tuple[Path, int]] = {}
        for order in orders:
            path = order_file(args.file or Path(tmp) / "bench.ndjson", order, orders)
            t = time.perf_counter()
            if path.exists():
                lines = count_lines(path)
                print(f"using {path}: {lines:,} records ({path.stat().st_size / 1e6:.0f} MB)")
            else:
                lines = make_file_apart(path, args.records, args.mix, order, args.epochs)
                print(f"generated {lines:,} records ({path.stat().st_size / 1e6:.0f} MB, {args.mix} mix, {order} "
                      f"order) in {time.perf_counter() - t:.1f}s")
            files[order] = path, lines

        def measure_orders(server: str, label: str) -> None:
            runs: dict[str, list[dict]] = {order: [] for order in orders}
            for i in range(args.repeat):  # alternated: each order goes first in every other repeat
                for order in orders[::-1] if i % 2 else orders:
                    path, lines = files[order]
                    runs[order].append(measure(server, path, lines, args.keep, args.floor))
            for order in orders:
                report(f"{label}; {order} order ({files[order][0].name})", runs[order])
            if len(orders) > 1:
                summary(runs)

        if not args.only_pg15:
            measure_orders(resolve_database_url(args.database_url),
                           "default server (" + ("--database-url" if args.database_url else "DATABASE_URL or embedded")
                           + ")")
        if args.pg15 or args.only_pg15:
            try:
                with stock_postgres(args.pg15_bindir) as (server, version):
                    measure_orders(server, f"stock server, default settings: {version}")
            except StockServerMissing as exc:
                print(f"-- stock server skipped: {exc}")
        if args.scale_file:
            path, lines = files[orders[0]]
            big = args.scale_file
            big_lines = (count_lines(big) if big.exists()
                         else make_file_apart(big, 10 * args.records, args.mix, orders[0], args.epochs))
            print(f"-- linearity, default server: {path.name} ({lines:,}) and {big.name} ({big_lines:,})")
            scale_check(resolve_database_url(args.database_url), path, lines, big, big_lines,
                        max(1, args.scale_rounds))
    return 0

if __name__ == "__main__":
    sys.exit(main())

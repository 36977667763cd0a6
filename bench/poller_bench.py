"""Poller throughput: devnet (its own process) → poller (HTTP on loopback) → PostgreSQL. Prints txs/s.

    python bench/poller_bench.py [--epochs 3] [--escrows-per-epoch 42] [--inferences-per-escrow 200]
                                 [--database-url URL] [--no-archive] [--no-process] [--in-process] [--keep]
                                 [--repeat N]

The devnet runs as ``python -m indexer.devnet`` in a separate process on the same machine (as a real node would:
the two then share the machine's cores); ``--in-process`` serves it from a thread of the benchmark instead.
Uses a fresh database on the server of --database-url ($DATABASE_URL, else the embedded PostgreSQL).
txs = protocol txs decoded from the hosts' diff logs (modelled and unmodelled); the time covers the whole
cycle (chain, tx_search, hosts, payloads, load) and, unless --no-process, replay and rules. The breakdown:
fetch (HTTP) and decode (protobuf, normalize, NDJSON: in the decode processes, waited for by the fetch threads)
are summed over the fetch threads; load (typing on the gathering thread, then COPY, upserts, cursors, archive on
the database thread) is wall time; the stages overlap, so they add up to more than the ingest wall time. The CPU
line counts this process (not its decode processes), the devnet process and every PostgreSQL process of the
cluster (other databases' work included).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__":
    # Not when a decode process runs this script again as ``__mp_main__`` (multiprocessing prepares every worker
    # that way): these imports cost each worker ~0.6 CPU-s, charged to the poll, while under `indexer run` the
    # main module is the light ``indexer.__main__``. The worker needs none of them.
    import httpx
    from indexer.db import migrate
    from indexer.db.scratch import scratch_database
    from indexer.db.url import resolve_database_url
    from indexer.poller import poll_once
    from indexer.poller.commit import ESCROW_WORKERS
    from indexer.poller.cycle import DECODE_WORKERS, PAYLOAD_WORKERS
    from cpu import descendants_cpu, postgres_cpu, process_cpu


class _Subprocess:
    def __init__(self, args) -> None:
        cmd = [sys.executable, "-m", "indexer.devnet", "--seed", "2078", "--epochs", str(args.epochs),
               "--escrows-per-epoch", str(args.escrows_per_epoch),
               "--inferences-per-escrow", str(args.inferences_per_escrow)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                     cwd=Path(__file__).resolve().parents[1])
        info = json.loads(self.proc.stdout.readline())
        self.chain_rest_url, self.rpc_url = info["chain_rest_url"], info["rpc_url"]
        self.url = self.chain_rest_url.rsplit("/chain-api", 1)[0]
        self.pid = self.proc.pid

    def state(self) -> dict:
        return httpx.get(f"{self.url}/devnet/state", timeout=60).json()

    def advance(self) -> None:
        httpx.post(f"{self.url}/devnet/advance", timeout=60).raise_for_status()

    def cpu(self) -> float | None:
        return process_cpu(self.proc.pid)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class _InProcess:
    def __init__(self, args) -> None:
        from indexer.devnet import DevnetServer, Scenario, ScenarioConfig

        scn = Scenario(ScenarioConfig(seed=2078, epochs=args.epochs, escrows_per_epoch=args.escrows_per_epoch,
                                      inferences_per_escrow=args.inferences_per_escrow))
        self.net = DevnetServer(scn, warm=True).start()
        self.chain_rest_url, self.rpc_url, self.url = self.net.chain_rest_url, self.net.rpc_url, self.net.url
        self.pid = None

    state = _Subprocess.state
    advance = _Subprocess.advance

    def cpu(self) -> float | None:
        return None  # inside this process

    def close(self) -> None:
        self.net.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3, help="devnet epochs in the scenario (default 3)")
    p.add_argument("--escrows-per-epoch", type=int, default=42, help="devnet escrows per epoch (default 42)")
    p.add_argument("--inferences-per-escrow", type=int, default=200,
                   help="devnet inferences per escrow (default 200)")
    p.add_argument("--database-url", help="server to measure (default: $DATABASE_URL, else the embedded PostgreSQL)")
    p.add_argument("--no-archive", action="store_true", help="do not archive raw responses")
    p.add_argument("--no-process", action="store_true", help="skip replay and rules")
    p.add_argument("--in-process", action="store_true", help="serve the devnet from a thread of this process")
    p.add_argument("--payload-workers", type=int, default=PAYLOAD_WORKERS, help="concurrent payload requests")
    p.add_argument("--escrow-workers", type=int, default=ESCROW_WORKERS, help="escrows fetched at once")
    p.add_argument("--decode-workers", type=int, default=DECODE_WORKERS,
                   help="decoding processes (0: in the fetch threads)")
    p.add_argument("--keep", action="store_true", help="keep the benchmark database")
    p.add_argument("--repeat", type=int, default=1,
                   help="poll the same devnet this many times (fresh databases) and print the median ratio")
    p.add_argument("--no-ndjson", action="store_true",
                   help="skip the baseline: the same records exported as NDJSON and loaded by `indexer ingest`")
    args = p.parse_args()

    t0 = time.perf_counter()
    net = (_InProcess if args.in_process else _Subprocess)(args)
    try:
        st = net.state()
        while st["current_epoch"] < st["last_epoch"]:
            net.advance()
            st = net.state()
        gen = time.perf_counter() - t0
        server = resolve_database_url(args.database_url)
        ratios = []
        for run in range(args.repeat):
            if args.repeat > 1:
                print(f"--- run {run + 1} of {args.repeat}")
            ratio = _poll_and_compare(args, net, st, gen, server)
            if ratio is not None:
                ratios.append(ratio)
        if len(ratios) > 1:
            print(f"poller ingest / NDJSON ingest over {len(ratios)} runs: median {statistics.median(ratios):.2f}x "
                  f"(runs: {', '.join(f'{r:.2f}' for r in ratios)}; issue 14 target >= 0.5x)")
    finally:
        net.close()
    return 0


def _poll_and_compare(args, net, st: dict, gen: float, server: str) -> float | None:
    """One poll of the whole devnet into a fresh database, then (unless --no-ndjson) the NDJSON baseline."""
    with scratch_database(server, "indexer_pbench", keep=args.keep) as url:
        migrate.upgrade(url)
        dev0, pg0, dec0 = net.cpu(), postgres_cpu(url), descendants_cpu(net.pid)
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        s = poll_once(url, net.chain_rest_url, net.rpc_url, archive=not args.no_archive,
                      process=not args.no_process, payload_workers=args.payload_workers,
                      escrow_workers=args.escrow_workers, decode_workers=args.decode_workers, private_hosts=True)
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        dev1, pg1, dec1 = net.cpu(), postgres_cpu(url), descendants_cpu(net.pid)
        poller_cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
        print(f"scenario: {st['escrows']} escrows, {st['diffs']} diffs, {st['txs']} txs "
              f"(devnet {'in-process' if args.in_process else 'subprocess'}, ready in {gen:.1f}s)")
        print(f"poll: {s.requests} requests, {s.diffs} diffs, {s.txs} txs, {s.loaded} rows, "
              f"replayed {s.replayed_escrows} escrows, rules on {s.rules_epochs} epochs, {s.seconds:.2f}s")
        ingest = s.seconds - s.t_replay - s.t_rules
        print(f"breakdown: fetch {s.t_fetch:.2f}s, decode {s.t_decode:.2f}s (thread sums); load {s.t_load:.2f}s "
              f"({s.transactions} transactions, {s.t_prepare:.2f}s typing), "
              f"replay {s.t_replay:.2f}s, rules {s.t_rules:.2f}s; ingest wall {ingest:.2f}s")
        print(f"{s.txs / s.seconds:,.0f} txs/s end to end ({s.diffs / s.seconds:,.0f} diffs/s, "
              f"{s.requests / s.seconds:,.0f} requests/s); ingest only (devnet → PostgreSQL): "
              f"{s.txs / ingest:,.0f} txs/s")
        print(f"cpu: poller {poller_cpu:.2f}s (+ worker processes (decode, replay) {dec1 - dec0:.2f}s), devnet "
              f"{'-' if dev0 is None or dev1 is None else f'{dev1 - dev0:.2f}s'}, PostgreSQL {pg1 - pg0:.2f}s "
              f"(over {s.seconds:.2f}s wall on {os.cpu_count()} cores; PostgreSQL counts all its processes)")
        if s.txs != st["txs"]:
            print(f"WARNING: polled {s.txs} txs, the scenario has {st['txs']}")
        if args.no_ndjson:
            return None
        return _compare_with_ndjson(server, url, s.txs, ingest, net.pid, None if args.no_process else s.seconds)


def _compare_with_ndjson(server: str, polled_url: str, txs: int, poll_ingest_seconds: float,
                         devnet_pid: int | None, poll_whole_seconds: float | None = None) -> float:
    """The baseline of issue 14: the records the poll stored, exported as NDJSON and loaded into a fresh database by
    the NDJSON loader (load only, as the poll's ingest figure excludes replay and rules), in the same run."""
    import tempfile

    from indexer.load.export import export_records
    from indexer.load.ingest import ingest_paths

    with tempfile.TemporaryDirectory() as tmp, scratch_database(server, "indexer_pbench_nd") as url:
        path = str(Path(tmp) / "polled.ndjson")
        export_records(polled_url, path, None)
        migrate.upgrade(url)
        pg0, kids0 = postgres_cpu(url), _children_cpu(devnet_pid)
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        ingest_paths(url, [path])
        seconds = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        pg1, kids1 = postgres_cpu(url), _children_cpu(devnet_pid)
        if poll_whole_seconds is not None:
            # the whole path a user runs on each side: the poll's cycle (fetch, checks, load, replay with its
            # verification, rules) against the file's load plus the same replay, verification and rules
            import psycopg

            from indexer.downstream import process_changes

            with psycopg.connect(url) as conn:
                t1 = time.perf_counter()
                process_changes(conn, url)
                whole = seconds + time.perf_counter() - t1
            print(f"whole path: NDJSON load + replay, verification and rules {whole:.2f}s; the poll's cycle "
                  f"{poll_whole_seconds:.2f}s; poller / NDJSON = {whole / poll_whole_seconds:.2f}x")
    loader = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    print(f"NDJSON ingest of the same records: {seconds:.2f}s = {txs / seconds:,.0f} txs/s; poller ingest / NDJSON "
          f"ingest = {seconds / poll_ingest_seconds:.2f}x (issue 14 target >= 0.5x)")
    print(f"cpu of the NDJSON ingest: loader {loader:.2f}s (+ typing workers {kids1 - kids0:.2f}s), "
          f"PostgreSQL {pg1 - pg0:.2f}s")
    return seconds / poll_ingest_seconds


def _children_cpu(devnet_pid: int | None) -> float:
    """CPU seconds of this process's descendants but the devnet, live or reaped (the file load's typing workers are
    this process's children, reaped when the load ends)."""
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return descendants_cpu(devnet_pid) + reaped.ru_utime + reaped.ru_stime


if __name__ == "__main__":
    sys.exit(main())

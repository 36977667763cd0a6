"""Poller throughput: in-process devnet → poller (HTTP on loopback) → PostgreSQL. Prints txs/s.

    python bench/poller_bench.py [--epochs 3] [--escrows-per-epoch 8] [--inferences-per-escrow 200]
                                 [--database-url URL] [--no-archive] [--no-process] [--keep]

Uses a fresh database on the server of --database-url ($DATABASE_URL, else the embedded PostgreSQL).
txs = protocol txs decoded from the hosts' diff logs (modelled and unmodelled); the time covers the whole
cycle (chain, tx_search, hosts, payloads, load) and, unless --no-process, replay and rules.
"""
from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer.db import migrate  # noqa: E402
from indexer.db.url import resolve_database_url  # noqa: E402
from indexer.devnet import DevnetServer, Scenario, ScenarioConfig  # noqa: E402
from indexer.poller import poll_once  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--escrows-per-epoch", type=int, default=8)
    p.add_argument("--inferences-per-escrow", type=int, default=200)
    p.add_argument("--database-url")
    p.add_argument("--no-archive", action="store_true", help="do not archive raw responses")
    p.add_argument("--no-process", action="store_true", help="skip replay and rules")
    p.add_argument("--payload-workers", type=int, default=1,
                   help="concurrent payload requests (1 is fastest against the in-process devnet)")
    p.add_argument("--keep", action="store_true", help="keep the benchmark database")
    args = p.parse_args()

    t0 = time.perf_counter()
    scn = Scenario(ScenarioConfig(seed=2078, epochs=args.epochs, escrows_per_epoch=args.escrows_per_epoch,
                                  inferences_per_escrow=args.inferences_per_escrow))
    gen = time.perf_counter() - t0
    server = resolve_database_url(args.database_url)
    name = f"indexer_pbench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(server)._replace(path="/" + name))
    try:
        migrate.upgrade(url)
        with DevnetServer(scn) as net:
            while net.devnet.current_epoch < scn.epochs[-1].epoch_index:
                net.advance_epoch()
            s = poll_once(url, net.chain_rest_url, net.rpc_url, archive=not args.no_archive,
                          process=not args.no_process, payload_workers=args.payload_workers)
        expected = sum(len(d["txs"]) for e in scn.escrows.values() for d in e.diffs)
        print(f"scenario: {len(scn.escrows)} escrows, {sum(len(e.diffs) for e in scn.escrows.values())} diffs, "
              f"{expected} txs (generated in {gen:.1f}s)")
        print(f"poll: {s.requests} requests, {s.diffs} diffs, {s.txs} txs, {s.loaded} rows, "
              f"replayed {s.replayed_escrows} escrows, rules on {s.rules_epochs} epochs, {s.seconds:.2f}s")
        print(f"{s.txs / s.seconds:,.0f} txs/s ({s.diffs / s.seconds:,.0f} diffs/s, "
              f"{s.requests / s.seconds:,.0f} requests/s)")
    finally:
        if not args.keep:
            with psycopg.connect(server, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())

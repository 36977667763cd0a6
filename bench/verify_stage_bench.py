"""Verification stage benchmark: what the stage costs beside the replay, on the same escrows in the same run, and how
much of it is the secp256k1 floor (bench/verify_bench.py times the verifier's session replay alone, per nonce).

    python bench/verify_stage_bench.py [--escrows 40] [--runs 3] [--devnet-inferences 200] [--grow-every 20]
                                       [--no-devnet] [--database-url URL]

Three cases, each in a database of its own:

- ``fixture``: the v4.1 release fixture (34 signed diffs, 25 txs, a settlement co-signed by 4 of 5 hosts:
  tests/support/verify_records.py) under ``--escrows`` ids;
- ``devnet``: the escrows of a devnet (indexer.devnet, v5, 16 slots, ``--devnet-inferences`` inferences each, about
  230 diffs and 800 txs at 200) captured by one poll, as the poller stores them; the settled ones are measured;
- ``growing``: the devnet escrows' logs arriving ``--grow-every`` diffs at a time, verified after each arrival as a
  poll cycle does, with the recoveries the stage keeps (indexer.replay.verify_memo) and with them forgotten before
  every cycle (every signature recovered again each cycle, as before the memo).

For the first two, each run times in fresh subprocesses, alternating so that every side sees the same machine load:
the replay alone (``replay_dirty`` with the stage switched off: the baseline), the verification alone
(:func:`indexer.replay.verification.verify_escrows` in the replay's chunks, one transaction each), and the replay
again with the stage on after every escrow was verified with the same evidence (only the digests compared). Each
side's wall time is taken with the CPU of the Python process and of its PostgreSQL backend (the replay's work is
mostly the server's): ratios are printed on both, the CPU ones being the steadier on a shared machine. Every side
counts the secp256k1 recoveries it makes; one more subprocess times a recovery alone, so each case prints the crypto
floor (recoveries x their CPU cost) beside the verification, both as ratios to the replay. The verification rows
must say ``settled`` for every measured escrow.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # bench/cpu.py
HOLD = "public.bench_signed_diff"  # the growing case's log, before it arrives


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


class _Clock:
    """Wall seconds, this process's CPU and its PostgreSQL backend's CPU, summed over the stretches timed: on a
    shared machine the CPU of both sides is the steadier measure (the replay's work is mostly the server's)."""

    def __init__(self, conn) -> None:
        self._pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.wall = self.cpu = self.server = 0.0

    def _backend(self) -> float:
        """The backend's CPU seconds: /proc schedstat counts nanoseconds (stat counts 10 ms ticks, too coarse for a
        replay of a few escrows)."""
        try:
            return int(Path(f"/proc/{self._pid}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, IndexError, ValueError):
            from cpu import process_cpu
            return process_cpu(self._pid) or 0.0

    def __enter__(self):
        self._start = (time.perf_counter(), _cpu(), self._backend())
        return self

    def __exit__(self, *exc) -> None:
        wall, cpu, server = self._start
        self.wall += time.perf_counter() - wall
        self.cpu += _cpu() - cpu
        self.server += self._backend() - server


def _counting():
    """Count every secp256k1 recovery (all of them go through signatures.recover_pubkey)."""
    from indexer.verify import signatures as sig
    count, real = [0], sig.recover_pubkey

    def counted(message, signature):
        count[0] += 1
        return real(message, signature)

    sig.recover_pubkey = counted
    return count


def _settled_ids(conn) -> list[str]:
    return [r[0] for r in conn.execute("SELECT escrow_id FROM rec.escrow WHERE settled ORDER BY 1")]


def _verify_chunks(conn, ids: list[str]) -> None:
    from indexer.replay import run as rr, verification
    for start in range(0, len(ids), rr.CHUNK_ESCROWS):  # in the replay's chunks, one transaction each
        with conn.transaction():
            verification.verify_escrows(conn, ids[start:start + rr.CHUNK_ESCROWS])


def child(url: str, side: str, every: int) -> dict:
    sys.path.insert(0, str(ROOT))
    import psycopg
    from indexer.replay import run as rr

    if side == "crypto":
        return {"recovery_us": _recovery_us()}
    count = _counting()
    with psycopg.connect(url) as conn:
        ids = _settled_ids(conn)
        if side != "again":
            conn.execute("TRUNCATE replay.escrow_verification")
        if side in ("replay", "again"):
            conn.execute("INSERT INTO replay.dirty_escrow (escrow_id) SELECT unnest(%s::text[]) "
                         "ON CONFLICT DO NOTHING", (ids,))
        conn.commit()
        clock, cycles = _Clock(conn), 1
        if side in ("grow", "grow-cold"):
            cycles = _grow(conn, ids, every, clock, forget=side == "grow-cold")
        elif side == "replay":
            rr.verify_escrows = lambda conn, ids: []  # the replay alone: the stage is what is measured beside it
            with clock:
                rr.replay_dirty(conn, chunk=rr.CHUNK_ESCROWS)
        elif side == "again":  # the pipeline's replay, stage on, every escrow verified before with the same evidence
            with clock:
                rr.replay_dirty(conn, chunk=rr.CHUNK_ESCROWS)
        else:
            with clock:
                _verify_chunks(conn, ids)
        levels = dict(conn.execute("SELECT level, count(*) FROM replay.escrow_verification WHERE escrow_id = ANY(%s) "
                                   "GROUP BY 1", (ids,)).fetchall())
    return {"wall": clock.wall, "cpu": clock.cpu, "server": clock.server, "both": clock.cpu + clock.server,
            "settled": levels.get("settled", 0), "escrows": len(ids),
            "recoveries": count[0], "cycles": cycles}


def _grow(conn, ids: list[str], every: int, clock: _Clock, forget: bool) -> int:
    """Let the held diffs arrive ``every`` nonces at a time and verify after each arrival; only the verification is
    timed (on ``clock``). Returns the number of cycles."""
    from psycopg import sql
    cols = sql.SQL(", ").join(sql.Identifier(c.name) for c in
                              conn.execute("SELECT * FROM rec.signed_diff LIMIT 0").description)
    conn.execute("DELETE FROM rec.signed_diff WHERE escrow_id = ANY(%s)", (ids,))
    last = conn.execute(f"SELECT max(nonce) FROM {HOLD}").fetchone()[0]
    cycles = 0
    for high in range(every, last + every, every):
        conn.execute(sql.SQL("INSERT INTO rec.signed_diff ({c}) SELECT {c} FROM {h} WHERE nonce > %s AND nonce <= %s")
                     .format(c=cols, h=sql.SQL(HOLD)), (high - every, high))
        if forget:  # as before the memo: every cycle recovers every signature of the log again
            conn.execute("UPDATE replay.escrow_verification SET prefix_nonces = 0, prefix_chain = NULL, "
                         "prefix_signers = NULL, prefix_recoveries = NULL")
        conn.commit()
        with clock:
            _verify_chunks(conn, ids)
        cycles += 1
    return cycles


def _recovery_us() -> float:
    """CPU microseconds of one recovery (median of 5 batches of 200), as the verifier makes it."""
    import coincurve
    from indexer.verify import signatures as sig
    message = b"bench message " * 8
    signature = coincurve.PrivateKey.from_int(12345).sign_recoverable(message)
    batches = []
    for _ in range(5):
        t = time.process_time()
        for _ in range(200):
            sig.recover_pubkey(message, signature)
        batches.append((time.process_time() - t) / 200 * 1e6)
    return statistics.median(batches)


def measure(url: str, side: str, every: int = 0) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", url, side, str(every)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _fixture_db(url: str, escrows: int) -> None:
    from indexer.load import ingest
    from indexer.synth import write_ndjson
    from tests.support.verify_records import epoch_params_record, records
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "verify_stage_bench.ndjson"
        recs = [epoch_params_record()]
        for n in range(escrows):
            recs += [r for r in records(str(1000 + n)) if r["kind"] != "epoch_params"]
        write_ndjson(str(path), recs)
        ingest.ingest_paths(url, [str(path)])


def _devnet_db(url: str, inferences: int) -> None:
    import psycopg
    from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
    from indexer.poller import poll_once
    from indexer.sources.gonka import RetryPolicy
    scn = Scenario(ScenarioConfig(inferences_per_escrow=inferences, escrows_per_epoch=3))
    with DevnetServer(scn, warm=True) as net:
        # an archive node: the one poll after the last epoch reads every ended epoch's warm keys as of its end
        net.app.options.state_retain_blocks = 10**9
        net.advance_to_last_epoch()
        poll_once(url, net.chain_rest_url, net.rpc_url, private_hosts=True,
                  policy=RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=10.0, attempts=3))
    with psycopg.connect(url) as conn:
        conn.execute(f"CREATE TABLE {HOLD} AS SELECT * FROM rec.signed_diff WHERE escrow_id = ANY(%s)",
                     (_settled_ids(conn),))


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _line(label: str, runs: list[dict], n: int) -> str:
    walls = [r["wall"] for r in runs]
    return (f"  {label:14} wall median {_median(runs, 'wall'):.3f}s (min {min(walls):.3f})  CPU median "
            f"{_median(runs, 'cpu'):.3f}s + server {_median(runs, 'server'):.3f}s  per escrow "
            f"{_median(runs, 'wall') / n * 1000:.2f} ms wall, {_median(runs, 'both') / n * 1000:.2f} ms CPU")


def report_case(name: str, url: str, runs: int, recovery_us: list[float]) -> bool:
    import psycopg
    with psycopg.connect(url) as conn:
        ids = _settled_ids(conn)
        diffs, = conn.execute("SELECT count(*) FROM rec.signed_diff WHERE escrow_id = ANY(%s)", (ids,)).fetchone()
    times: dict[str, list[dict]] = {"replay": [], "verify": [], "again": []}
    for _ in range(runs):
        for side in times:
            times[side].append(measure(url, side))
        recovery_us.append(measure(url, "crypto")["recovery_us"])
    n, cost = len(ids), statistics.median(recovery_us)
    replay, verify = _median(times["replay"], "both"), _median(times["verify"], "both")
    recoveries = times["verify"][0]["recoveries"]
    floor = recoveries * cost / 1e6
    print(f"{name}: {n} escrows, {diffs / n:.0f} signed diffs each")
    for side, label in (("replay", "replay alone"), ("verify", "verification"), ("again", "replay again")):
        print(_line(label, times[side], n))
    print(f"  recoveries per escrow {recoveries / n:.0f} at {cost:.1f} us CPU each: the crypto floor "
          f"{floor / n * 1000:.2f} ms per escrow")
    print(f"  verification / replay: {_median(times['verify'], 'wall') / _median(times['replay'], 'wall'):.2f}x "
          f"wall, {verify / replay:.2f}x CPU (target at most 1.00x); crypto floor / replay: {floor / replay:.2f}x "
          f"CPU; the rest (reads, session replay, roots, rows) / replay: {(verify - floor) / replay:.2f}x CPU")
    print(f"  replay again with the stage on, evidence unchanged / replay alone: "
          f"{_median(times['again'], 'wall') / _median(times['replay'], 'wall'):.2f}x wall, "
          f"{_median(times['again'], 'both') / replay:.2f}x CPU (the digests checked, nothing re-verified)")
    settled = {r["settled"] for r in times["verify"]}
    print(f"  escrows verified to settled: {sorted(settled)} of {n}")
    return settled == {n}


def report_growing(url: str, runs: int, every: int, recovery_us: list[float]) -> bool:
    sides: dict[str, list[dict]] = {"grow": [], "grow-cold": [], "replay": []}
    for _ in range(runs):
        for side in sides:
            sides[side].append(measure(url, side, every))
    warm, cold = sides["grow"][0], sides["grow-cold"][0]
    n, cycles, cost = warm["escrows"], warm["cycles"], statistics.median(recovery_us)
    print(f"growing: the same {n} devnet escrows, their logs arriving {every} diffs a cycle ({cycles} cycles), "
          f"verified after each")
    for side, label in (("grow", "memo kept"), ("grow-cold", "memo forgotten")):
        rec = sides[side][0]["recoveries"]
        print(f"{_line(label, sides[side], n)}; recoveries per escrow {rec / n:.0f} "
              f"(floor {rec * cost / 1e6 / n * 1000:.1f} ms)")
    # each cycle replays the escrow whole (replay_dirty on a dirty escrow): the replay alone, once per cycle
    replay = _median(sides["replay"], "both") * cycles
    print(f"  the replay at each cycle (the escrow replayed whole, as replay_dirty does): {replay:.3f}s CPU")
    print(f"  verification / replay over the cycles: memo kept {_median(sides['grow'], 'both') / replay:.2f}x CPU, "
          f"forgotten {_median(sides['grow-cold'], 'both') / replay:.2f}x CPU; recoveries "
          f"{warm['recoveries'] / max(cold['recoveries'], 1):.2f} of the forgotten case's")
    return {r["settled"] for r in sides["grow"] + sides["grow-cold"]} == {n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--escrows", type=int, default=40, help="fixture escrows to replay and verify (default 40)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each side (the median is reported, the min beside)")
    ap.add_argument("--devnet-inferences", type=int, default=200, help="inferences per devnet escrow (default 200)")
    ap.add_argument("--grow-every", type=int, default=20, help="diffs per cycle in the growing case (default 20)")
    ap.add_argument("--no-devnet", action="store_true", help="the fixture case only")
    ap.add_argument("--database-url", help="server to measure (default: $DATABASE_URL, else the embedded PostgreSQL)")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from indexer.db import migrate
    from indexer.db.scratch import scratch_database
    from indexer.db.url import resolve_database_url

    server = resolve_database_url(args.database_url)
    ok, recovery_us = True, []
    with scratch_database(server, "vb") as url:
        migrate.upgrade(url)
        _fixture_db(url, args.escrows)
        ok &= report_case("fixture", url, args.runs, recovery_us)
    if not args.no_devnet:
        with scratch_database(server, "vd") as url:
            migrate.upgrade(url)
            _devnet_db(url, args.devnet_inferences)
            ok &= report_case("devnet", url, args.runs, recovery_us)
            ok &= report_growing(url, args.runs, args.grow_every, recovery_us)
    print(f"one recovery: median {statistics.median(recovery_us):.1f} us CPU over {len(recovery_us)} timings")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        sys.exit(0)
    sys.exit(main())

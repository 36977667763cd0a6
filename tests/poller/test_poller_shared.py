"""Three ``indexer run --once`` pollers on one database against one devnet, one of them killed with SIGKILL in the
middle of its cycle: the survivors take its leases over once they expire and the database ends with exactly the
record, replay and rules tables of a single clean run, every escrow fetched once (issue 13)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from indexer.devnet import DevnetServer, FaultConfig, Scenario, ScenarioConfig
from tests.support.helpers import LOAD_TIMES, db_state

ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 3  # short, so the dead poller's work is taken over quickly; long enough for a busy machine's beats
PROVENANCE = LOAD_TIMES | {"source_id", "source_line", "detected_at"}
RULE_TABLES = ["rules.refusal_parse", "rules.model_limit", "rules.escrow_limit", "rules.context_refusal",
               "rules.sibling_finding", "rules.suspect", "rules.challenge", "rules.disputable"]


def _scenario() -> Scenario:
    # enough escrows that each poller's fetch threads finish some while holding others
    return Scenario(ScenarioConfig(seed=29, epochs=3, escrows_per_epoch=6, inferences_per_escrow=24))


def _poller(url: str, net: DevnetServer, out: Path) -> subprocess.Popen:
    # every connection of the poller names it (libpq's PGAPPNAME), so the test can tell when its backends are gone
    env = dict(os.environ, GONKA_CHAIN_REST_URL=net.chain_rest_url, GONKA_RPC_URL=net.rpc_url, PYTHONPATH=str(ROOT),
               PGAPPNAME=f"poller-{out.stem}")
    with open(out, "wb") as stdout:  # a file, not a pipe: nobody reads while the pollers run
        return subprocess.Popen([sys.executable, "-m", "indexer", "--database-url", url, "run", "--once",
                                 "--lease-seconds", str(LEASE_SECONDS), "--metrics-addr", "off", "--no-alerts",
                                 "--allow-private-hosts"],
                                env=env, cwd=ROOT, stdout=stdout, stderr=subprocess.STDOUT)


def _state(url: str) -> dict:
    state = db_state(url, exclude=PROVENANCE)
    state.pop("rec.source", None)  # provenance: the fetches were batched differently
    state.update(db_state(url, exclude=PROVENANCE, tables=RULE_TABLES))
    return state


def _fetched(out: Path) -> int:
    """Escrows a poller fetched, from its cycle summary line."""
    found = re.findall(r"(\d+) escrow\(s\) fetched", out.read_text())
    assert len(found) == 1, out.read_text()
    return int(found[0])


def _waiting_at_gate(c: psycopg.Connection) -> int:
    return c.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                     "AND query LIKE '%%net.epoch_state%%' AND pid <> pg_backend_pid()").fetchone()[0]


def _victim(c: psycopg.Connection, pids: set[int]) -> tuple[str, int] | None:
    """A poller that has finished (committed and released) an escrow and is fetching another one: it holds its
    lease and has committed nothing of it yet (the lease's resource is the escrow's cursor source)."""
    rows = c.execute("SELECT holder FROM net.lease l WHERE resource LIKE 'escrow:%%' GROUP BY holder "
                     "HAVING bool_or(released_at IS NOT NULL) AND bool_or(released_at IS NULL AND NOT EXISTS "
                     "(SELECT 1 FROM net.cursor c WHERE c.source = l.resource)) ORDER BY holder").fetchall()
    for (holder,) in rows:
        pid = int(holder.split(":")[-2])
        if pid in pids:
            return holder, pid
    return None


def test_three_pollers_one_killed_end_like_one_clean_run(db_url, second_db_url, tmp_path):
    scn = _scenario()
    with DevnetServer(scn) as net:
        clean = _poller(db_url, net.advance_to_last_epoch(), tmp_path / "clean.out")
        assert clean.wait(timeout=300) == 0, (tmp_path / "clean.out").read_text()
    assert _fetched(tmp_path / "clean.out") == len(scn.escrows)

    # slow hosts: an escrow takes seconds, so a poller commits its first escrows (the commit thread waits 0.5 s
    # for more before it commits) while its fetch threads are on the next ones; slow host epoch stats too
    hosts = tuple(h.address for h in scn.hosts)
    slow = FaultConfig(slow_hosts=hosts, slow_seconds=0.2, p_delay=1.0, delay_seconds=0.3,
                       paths=("/chain-api/productscience/inference/inference/devshard_host_epoch_stats/",))
    with DevnetServer(_scenario(), faults=slow) as net:
        net.advance_to_last_epoch()
        procs: dict[int, subprocess.Popen] = {}
        outs: dict[int, Path] = {}
        with psycopg.connect(second_db_url) as gate:
            # the three cycles start together: each takes its cycle's start time (the database's, for the
            # leases) and then reads net.epoch_state, which this transaction keeps locked until all three wait
            gate.execute("LOCK TABLE net.epoch_state IN ACCESS EXCLUSIVE MODE")
            for k in range(3):
                proc = _poller(second_db_url, net, tmp_path / f"poller{k}.out")
                procs[proc.pid], outs[proc.pid] = proc, tmp_path / f"poller{k}.out"
            with psycopg.connect(second_db_url, autocommit=True) as watch:
                deadline = time.monotonic() + 120
                while _waiting_at_gate(watch) < 3:
                    assert all(p.poll() is None for p in procs.values()), "a poller ended before its cycle began"
                    assert time.monotonic() < deadline, "the pollers never reached the start of their cycle"
                    time.sleep(0.01)
                gate.commit()

                # kill one, deterministically mid-cycle: once it has committed an escrow and holds another
                try:
                    deadline = time.monotonic() + 120
                    while (victim := _victim(watch, set(procs))) is None:
                        ended = [p for p in procs if procs[p].poll() is not None]
                        assert not ended, "a cycle ended before the kill: " + "; ".join(
                            f"exit {procs[p].returncode}, {outs[p].read_text()[-2000:]}" for p in ended)
                        assert time.monotonic() < deadline, "no poller ever held an escrow after finishing one"
                        time.sleep(0.01)
                    holder, pid = victim
                    assert procs[pid].poll() is None
                    backends = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                    assert watch.execute(backends, (f"poller-{outs[pid].stem}",)).fetchone()[0] > 0
                    procs[pid].send_signal(signal.SIGKILL)
                    assert procs[pid].wait(timeout=30) == -signal.SIGKILL
                    # a statement it sent before it died (a release, a commit) still runs to its end on the server:
                    # what it held is read once its backends have ended
                    deadline = time.monotonic() + 60
                    while watch.execute(backends, (f"poller-{outs[pid].stem}",)).fetchone()[0]:
                        assert time.monotonic() < deadline, "the killed poller's backends never ended"
                        time.sleep(0.01)
                    held = [r for (r,) in watch.execute("SELECT resource FROM net.lease WHERE holder = %s AND "
                                                        "released_at IS NULL ORDER BY 1", (holder,))]
                    released = watch.execute("SELECT count(*) FROM net.lease WHERE holder = %s AND resource LIKE "
                                             "'escrow:%%' AND released_at IS NOT NULL", (holder,)).fetchone()[0]
                    # escrows it committed to the end but did not release (killed in between): nothing to redo
                    final = watch.execute("SELECT count(*) FROM net.cursor WHERE source = ANY(%s)",
                                          ([f"escrow-final:{r.split(':')[1]}" for r in held],)).fetchone()[0]
                    in_flight = watch.execute("SELECT count(*) FROM unnest(%s::text[]) r WHERE r LIKE 'escrow:%%' "
                                              "AND NOT EXISTS (SELECT 1 FROM net.cursor WHERE source = r)",
                                              (held,)).fetchone()[0]
                    assert released > 0 and in_flight > 0
                    survivors = [p for p in procs if p != pid]
                    for p in survivors:
                        assert procs[p].wait(timeout=300) == 0, outs[p].read_text()
                finally:
                    for proc in procs.values():
                        if proc.poll() is None:
                            proc.kill()
                            proc.wait(timeout=30)

    assert _state(second_db_url) == _state(db_url)
    with psycopg.connect(second_db_url) as c:
        assert c.execute("SELECT count(*) FROM rec.finish_tx").fetchone()[0] > 0
        # every lease the killed poller held was taken over by a survivor, who finished and released it
        rows = c.execute("SELECT resource, holder, taken_from, takeovers, released_at IS NOT NULL FROM net.lease "
                         "WHERE resource = ANY(%s) ORDER BY 1", (held,)).fetchall()
        assert [r[0] for r in rows] == held
        survivor_holders = {h for (h,) in c.execute("SELECT DISTINCT holder FROM net.lease")} - {holder}
        assert {int(h.split(":")[-2]) for h in survivor_holders} <= set(survivors)
        for resource, now_holder, taken_from, takeovers, done in rows:
            assert (now_holder in survivor_holders, taken_from, takeovers, done) == (True, holder, 1, True), resource
        assert c.execute("SELECT count(*) FROM net.lease WHERE released_at IS NULL").fetchone()[0] == 0
    # no escrow fetched twice: the survivors fetched exactly those the killed poller did not finish
    assert sum(_fetched(outs[p]) for p in survivors) + released + final == len(scn.escrows)
    # and they said so in their summaries
    assert sum(int(m) for p in survivors
               for m in re.findall(r"(\d+) lease\(s\) taken over", outs[p].read_text())) == len(held)

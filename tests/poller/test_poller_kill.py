"""kill -9 of ``indexer run --once`` in the middle of a cycle, then a rerun: the same rec.* and replay.* rows as a
clean run (rows and cursors commit together, so the rerun resumes from the cursors and refetches the rest)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from indexer.devnet import DevnetServer, FaultConfig, Scenario, ScenarioConfig
from tests.support.helpers import LOAD_TIMES, db_state

ROOT = Path(__file__).resolve().parents[2]
# provenance differs by construction: a resumed escrow's rows come from other fetches (rec.source rows, ids, lines)
PROVENANCE = LOAD_TIMES | {"source_id", "source_line"}


def _scenario() -> Scenario:
    return Scenario(ScenarioConfig(seed=13, epochs=3, escrows_per_epoch=3, inferences_per_escrow=40))


def _run_once(url: str, net: DevnetServer) -> subprocess.Popen:
    # short leases: the rerun takes over the killed poller's leases once they expire (test_poller_shared.py)
    env = dict(os.environ, GONKA_CHAIN_REST_URL=net.chain_rest_url, GONKA_RPC_URL=net.rpc_url,
               PYTHONPATH=str(ROOT), INDEXER_LEASE_SECONDS="3")
    return subprocess.Popen([sys.executable, "-m", "indexer", "run", "--once", "--allow-private-hosts",
                             "--database-url", url], env=env,
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _escrow_cursors(url: str) -> int:
    with psycopg.connect(url) as c:
        return c.execute("SELECT count(*) FROM net.cursor WHERE source LIKE 'escrow:%%'").fetchone()[0]


def _state(url: str) -> dict:
    state = db_state(url, exclude=PROVENANCE)
    state.pop("rec.source", None)
    return state


def _helper_processes() -> set[int]:
    """Pids of multiprocessing helpers (forkserver, decode workers, resource tracker) on this machine."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if b"multiprocessing" in (d / "cmdline").read_bytes():
                    out.add(int(d.name))
            except OSError:
                pass
    return out


def test_kill_9_mid_cycle_then_rerun_equals_clean_run(db_url, second_db_url):
    with DevnetServer(_scenario()) as net:
        clean = _run_once(db_url, net.advance_to_last_epoch())
        assert clean.wait(timeout=300) == 0, clean.stderr.read().decode()

    # slow hosts (every host request waits), so the kill lands between the first commit and the end of the cycle;
    # the escrows' first commit can come as their fetches end, so the host epoch stats read after them are slower
    # still: the cycle's last commit stays a second or more away from the first escrow cursor, even on a busy machine
    hosts = tuple(h.address for h in _scenario().hosts)
    slow = FaultConfig(slow_hosts=hosts, slow_seconds=0.03, p_delay=1.0, delay_seconds=0.3,
                       paths=("/chain-api/productscience/inference/inference/devshard_host_epoch_stats/",))
    with DevnetServer(_scenario(), faults=slow) as net:
        net.advance_to_last_epoch()
        before = _helper_processes()
        proc = _run_once(second_db_url, net)
        deadline = time.monotonic() + 120
        try:
            while _escrow_cursors(second_db_url) == 0:
                assert proc.poll() is None, "the cycle finished before any escrow cursor was committed"
                assert time.monotonic() < deadline, "no escrow cursor committed within 120 s"
                time.sleep(0.01)
            assert proc.poll() is None, "the cycle finished before the kill"
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        # the killed poller's decode workers notice and leave (and with them its forkserver and resource tracker)
        deadline = time.monotonic() + 15
        while _helper_processes() - before:
            assert time.monotonic() < deadline, f"left behind: {sorted(_helper_processes() - before)}"
            time.sleep(0.05)
        partial = _escrow_cursors(second_db_url)
        assert 0 < partial
        with psycopg.connect(second_db_url) as c:
            finished = c.execute("SELECT count(*) FROM net.cursor WHERE source = 'chain'").fetchone()[0]
        assert finished == 0  # the cycle's last commit never happened

        rerun = _run_once(second_db_url, net)
        assert rerun.wait(timeout=300) == 0, rerun.stderr.read().decode()

    assert _state(second_db_url) == _state(db_url)
    with psycopg.connect(second_db_url) as c:
        assert c.execute("SELECT count(*) FROM rec.finish_tx").fetchone()[0] > 0

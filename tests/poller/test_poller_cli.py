"""`indexer run --once`, `indexer run` (SIGTERM), `indexer devnet` (several pollers: test_poller_shared.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psycopg

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig


def _scn():
    return Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=1, inferences_per_escrow=12))


def _env(net):
    return {**os.environ, "GONKA_CHAIN_REST_URL": net.chain_rest_url, "GONKA_RPC_URL": net.rpc_url}


def test_run_once_cli(db_url):
    with DevnetServer(_scn()) as net:
        proc = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "run", "--once",
                               "--allow-private-hosts"], env=_env(net), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM rec.start_tx").fetchone()[0] > 0
        assert c.execute("SELECT count(*) FROM api.ingest_status WHERE source = 'chain'").fetchone()[0] == 1


def test_run_without_endpoints_is_bad_usage(db_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GONKA_")}
    proc = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "run", "--once"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2


def test_run_scheduler_stops_on_sigterm(db_url):
    with DevnetServer(_scn()) as net:
        proc = subprocess.Popen([sys.executable, "-m", "indexer", "--database-url", db_url, "run", "--interval", "1",
                                 "--allow-private-hosts"],
                                env=_env(net), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 60
            while time.time() < deadline:
                with psycopg.connect(db_url) as c:
                    if c.execute("SELECT count(*) FROM net.cursor WHERE source = 'chain'").fetchone()[0]:
                        break
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_devnet_command_prints_urls():
    proc = subprocess.Popen([sys.executable, "-m", "indexer", "devnet", "--epochs", "1", "--escrows-per-epoch", "1",
                             "--inferences-per-escrow", "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        urls = json.loads(proc.stdout.readline())
        import httpx

        assert httpx.get(urls["chain_rest_url"] + "/productscience/inference/inference/get_current_epoch").status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_run_once_cli_gives_up_missing_payloads_after_payload_attempts(db_url):
    scn = Scenario(ScenarioConfig(seed=11, epochs=2, escrows_per_epoch=4, inferences_per_escrow=30))
    args = [sys.executable, "-m", "indexer", "--database-url", db_url, "run", "--once", "--allow-private-hosts",
            "--payload-attempts", "2", "--payload-backoff", "0.001", "--metrics-addr", "off", "--no-alerts"]
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.payload_statuses = {h.address: 404 for h in scn.hosts}
        first = subprocess.run(args, env=_env(net), capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr
        with psycopg.connect(db_url) as c:
            n = c.execute("SELECT count(*) FROM api.awaited_payloads WHERE state = 'awaited'").fetchone()[0]
        assert n > 0
        second = subprocess.run(args, env=_env(net), capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert f"payloads asked again {n}, obtained 0, given up {n}" in second.stderr
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT state, count(*) FROM api.awaited_payloads GROUP BY 1").fetchall() == [("given_up", n)]


def test_run_refuses_fewer_than_two_payload_attempts(db_url):
    proc = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "run", "--once",
                           "--payload-attempts", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--payload-attempts: must be at least 2 (the escrow's fetch is the first attempt), got 1" in proc.stderr

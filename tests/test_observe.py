"""`indexer run`'s /metrics, /health and /ready over real HTTP against a real database: the metric names of
interface.md §1, readiness turning 503 when the database is gone or a source lags and back to 200, and an address in
use stopping the start with exit 2."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from indexer.alerts.engine import Policy, evaluate
from indexer.alerts.rules import load_rules
from indexer.observe.server import MetricsServer, parse_addr
from indexer.records import KINDS
from indexer.settings import ConfigError
from indexer.synth import generate, write_ndjson
from tests.helpers import ingest


@pytest.fixture
def server(db_url):
    with MetricsServer(("127.0.0.1", 0), db_url, max_lag=900) as s:
        yield s


def _samples(server) -> dict:
    text = httpx.get(f"http://{server.address}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_metrics_carry_the_interface_names_with_database_values(db_url, tmp_path, server):
    path = tmp_path / "s.ndjson"
    write_ndjson(str(path), generate(seed=5, escrows=2, inferences=60, mix="adversarial"))
    ingest(db_url, path, rules=True)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO net.cursor (source, cursor, last_success_at) VALUES "
                     "('chain', '9', now() - interval '100 seconds'), ('escrow:1', '3', now() - interval '5 seconds')")
        conn.execute("INSERT INTO net.failure (source, url, error, transient) VALUES "
                     "('escrow:1', 'http://h/x', 'timeout', true), ('escrow:2', 'http://h/y', 'timeout', true)")
        evaluate(conn, load_rules(), [], Policy())
        by_rule = dict(conn.execute("SELECT rule, count(*) FROM api.disputable_penalties GROUP BY 1").fetchall())
        stored = {kind.name: conn.execute(f"SELECT count(*) FROM rec.{kind.table}").fetchone()[0]
                  for kind in KINDS.values()}
        stored = {name: n for name, n in stored.items() if n}
        firing = conn.execute("SELECT count(*) FROM api.alerts WHERE rule = 'disputable_penalty'").fetchone()[0]
    server.metrics.observe_cycle(1.5)
    m = _samples(server)
    assert 99 <= m[("indexer_source_lag_seconds", (("source", "chain"),))] < 200
    assert m[("indexer_source_errors_total", (("source", "escrow"),))] == 2
    # every kind as stored: the tx kinds' rows are in their epoch partitions (part.*), not in rec.*
    assert {kind: m.get(("indexer_rows_ingested_total", (("kind", kind),))) for kind in stored} == stored
    assert stored["escrow"] >= 2 and stored["start"] > 0 and stored["finish"] > 0
    assert by_rule and all(m[("indexer_disputable_penalties", (("rule", r),))] == n for r, n in by_rule.items())
    assert firing and m[("indexer_alerts_firing", (("rule", "disputable_penalty"),))] == firing
    assert m[("indexer_cycle_seconds_count", ())] == 1 and m[("indexer_cycle_seconds_sum", ())] == 1.5
    assert m[("indexer_database_up", ())] == 1 and m[("indexer_ready", ())] == 1


def test_ready_turns_503_when_the_database_is_gone_or_a_source_lags_and_recovers(db_url, pg_admin_url, server):
    base = f"http://{server.address}"
    assert httpx.get(base + "/health").status_code == 200
    assert httpx.get(base + "/ready").json() == {"ready": True, "max_lag_seconds": 900, "database": "ok",
                                                 "lagging": []}
    name = db_url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            r = httpx.get(base + "/ready")
            assert r.status_code == 503 and r.json()["database"].startswith("unreachable")
            assert httpx.get(base + "/health").status_code == 200  # alive, just not ready
            assert _samples(server)[("indexer_database_up", ())] == 0  # the scrape itself still answers
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    assert httpx.get(base + "/ready").status_code == 200
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO net.cursor (source, cursor, last_success_at) VALUES "
                     "('escrow:5', '1', now() - interval '1 hour')")
        r = httpx.get(base + "/ready")
        assert r.status_code == 503 and [x["source"] for x in r.json()["lagging"]] == ["escrow:5"]
        conn.execute("UPDATE net.cursor SET last_success_at = now() WHERE source = 'escrow:5'")
    assert httpx.get(base + "/ready").status_code == 200


def test_metrics_addr_parsing():
    assert parse_addr("off") is None
    assert parse_addr("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_addr("[::1]:9") == ("::1", 9)
    with pytest.raises(ConfigError, match="HOST:PORT"):
        parse_addr("9464x")


def test_run_with_the_metrics_address_in_use_exits_2_naming_it(db_url):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "GONKA_CHAIN_REST_URL": "http://127.0.0.1:9", "GONKA_RPC_URL": "http://127.0.0.1:9"}
        run = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "run", "--metrics-addr",
                              f"127.0.0.1:{port}"], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert f"127.0.0.1:{port} is already in use" in run.stderr


def test_run_once_polls_then_evaluates_and_delivers_alerts(db_url):
    from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
    from tests.alerts_kit import Receiver

    receiver = Receiver()
    try:
        with DevnetServer(Scenario(ScenarioConfig(seed=2078, epochs=1, escrows_per_epoch=3,
                                                  inferences_per_escrow=60))) as net:
            env = {**os.environ, "GONKA_CHAIN_REST_URL": net.chain_rest_url, "GONKA_RPC_URL": net.rpc_url}
            run = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "run", "--once",
                                  "--allow-private-hosts", "--webhook", receiver.url + "/alerts"], env=env, capture_output=True, text=True,
                                 timeout=180)
        assert run.returncode == 0, run.stderr
        with psycopg.connect(db_url) as conn:
            firing = conn.execute("SELECT count(*) FROM api.alerts WHERE status = 'firing'").fetchone()[0]
            delivered = conn.execute("SELECT count(*) FROM api.alert_deliveries WHERE status = 'delivered'"
                                     ).fetchone()[0]
        assert firing > 0 and delivered == firing == len(receiver.delivered())
        assert "alerts:" in run.stdout + run.stderr
    finally:
        receiver.close()

"""`indexer run`'s /metrics, /health and /ready over real HTTP against a real database: the metric names of
interface.md §1, readiness turning 503 when the database is gone or a source lags and back to 200, and an address in
use stopping the start with exit 2."""
from __future__ import annotations

import os
import logging
import socket
import subprocess
import sys
import threading

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from indexer.alerts.engine import Policy, evaluate
from indexer.alerts.rules import load_rules
from indexer.observe.metrics import APPLICATION_NAME, Metrics
from indexer.observe.server import MetricsServer, parse_addr
from indexer.records import KINDS
from indexer.settings import ConfigError
from indexer.synth import generate, write_ndjson
from tests.support.helpers import ingest


@pytest.fixture
def server(db_url):
    # max_age 0: every request sees the database as it is now (the default serves a result up to 5 s old)
    with MetricsServer(("127.0.0.1", 0), db_url, 900, metrics=Metrics(db_url, 900, max_age=0)) as s:
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


def test_ready_turns_503_when_the_database_is_gone_or_a_source_lags_and_recovers(db_url, pg_admin_url, server,
                                                                                 caplog):
    base = f"http://{server.address}"
    assert httpx.get(base + "/health").status_code == 200
    assert httpx.get(base + "/ready").json() == {"ready": True, "max_lag_seconds": 900, "database": "ok",
                                                 "lagging": []}
    name = db_url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        # the database goes away: its connections end, and no new one is allowed
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                      (APPLICATION_NAME,))
        try:
            r = httpx.get(base + "/ready")
            assert r.status_code == 503 and r.json()["database"].startswith("unreachable")
            assert httpx.get(base + "/health").status_code == 200  # alive, just not ready
            assert _samples(server)[("indexer_database_up", ())] == 0  # the scrape itself still answers
            failures = [r for r in caplog.records if r.getMessage().startswith("metrics: database unreachable")]
            assert failures and all(r.exc_info is None and "\n" not in r.getMessage() for r in failures)
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
    from tests.support.alerts_kit import Receiver

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


def test_concurrent_scrapes_use_one_connection_and_all_get_an_answer(db_url):
    """150 scrapes at once, three times (every refresh allowed: max_age 0): the database sees at most one metrics
    connection and every scrape answers with the database up."""
    n, answers, most, seen = 150, [], 0, set()
    with MetricsServer(("127.0.0.1", 0), db_url, 900, metrics=Metrics(db_url, 900, max_age=0)) as server, \
            psycopg.connect(db_url, autocommit=True, application_name="test-watch") as watch:
        for _ in range(3):
            barrier = threading.Barrier(n)

            def scrape():
                barrier.wait()
                answers.append(httpx.get(f"http://{server.address}/metrics", timeout=60))

            threads = [threading.Thread(target=scrape) for _ in range(n)]
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):  # sample the server's connections while the burst runs
                names = [r[0] for r in watch.execute(
                    "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                    "AND backend_type = 'client backend' AND pid <> pg_backend_pid()").fetchall()]  # not autovacuum
                most, seen = max(most, len(names)), seen | set(names)
            for t in threads:
                t.join()
    assert len(answers) == 3 * n and {a.status_code for a in answers} == {200}
    assert all("indexer_database_up 1.0" in a.text for a in answers)
    assert most <= 1 and seen <= {APPLICATION_NAME}, (most, seen)


def test_firing_alerts_have_a_series_per_rule_even_when_none_fires(db_url, server):
    rules = {r.name for r in load_rules()}
    firing = {labels[0][1]: v for (name, labels), v in _samples(server).items() if name == "indexer_alerts_firing"}
    assert firing == {rule: 0 for rule in rules}
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO alert.state (alert_key, rule, severity, status, summary, first_fired_at, "
                     "last_seen_at, last_evaluated_at) VALUES ('custom:x', 'custom', 'info', 'firing', 's', now(), "
                     "now(), now())")
    firing = {labels[0][1]: v for (name, labels), v in _samples(server).items() if name == "indexer_alerts_firing"}
    assert firing == {**{rule: 0 for rule in rules}, "custom": 1}  # a rule from another rules directory too


def test_a_failed_request_is_logged_as_one_line(server, caplog):
    caplog.set_level(logging.WARNING, "indexer.observe.server")
    try:
        raise BrokenPipeError(32, "Broken pipe")  # what writing to a scraper that hung up raises
    except BrokenPipeError:
        server.httpd.handle_error(None, ("127.0.0.1", 40000))
    (record,) = caplog.records
    assert record.exc_info is None and record.getMessage() == (
        "metrics: request from 127.0.0.1 failed: BrokenPipeError: [Errno 32] Broken pipe")


def test_escrows_per_evidence_level_every_level_with_zero(db_url, tmp_path, server):
    from tests.support.restitution_kit import small_escrow
    from tests.support.rules_kit import load

    load(db_url, tmp_path, [r for e in ("8001", "8002", "8003") for r in small_escrow(e, 600, invalid=0, served=2)])
    with psycopg.connect(db_url, autocommit=True) as conn:  # 8003 has no verification row: none
        conn.execute("DELETE FROM replay.escrow_verification")  # the stage's rows (no signed log); set here by hand
        conn.execute("INSERT INTO replay.escrow_verification (escrow_id, level, failed_check, failure) VALUES "
                     "('8001', 'settled', NULL, NULL), ('8002', 'none', 'signed', 'signature of another key')")
    m = _samples(server)
    assert {level: m[("indexer_escrows_by_evidence_level", (("level", level),))]
            for level in ("none", "signed", "replayed", "settled")} == {"none": 2, "signed": 0, "replayed": 0,
                                                                      "settled": 1}


def test_missing_payloads_per_state_both_with_zero(db_url, server):
    m = _samples(server)
    assert {s: m[("indexer_missing_payloads", (("state", s),))] for s in ("awaited", "given_up")} == {
        "awaited": 0, "given_up": 0}
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO net.awaited_payload (escrow_id, inference_id, epoch_index, protocol_version, "
                     "record, next_attempt_at, given_up_at) VALUES ('7', 1, 3, 'v5', '{}', now(), NULL), "
                     "('8', 1, 3, 'v5', '{}', now(), now()), ('8', 2, 3, 'v5', '{}', now(), now())")
    m = _samples(server)
    assert {s: m[("indexer_missing_payloads", (("state", s),))] for s in ("awaited", "given_up")} == {
        "awaited": 1, "given_up": 2}

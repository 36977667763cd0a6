"""`indexer status` as a script or cron job runs it: the screen, --json, and the exit code (0 healthy, 1 not, 2 no
database), through a real database."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]


def status(url: str, *args: str, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "INDEXER_READY_MAX_LAG")}
    if home is not None:
        env["INDEXER_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "indexer", "status", "--database-url", url, *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def as_json(url: str, *args: str) -> tuple[int, dict]:
    res = status(url, "--json", *args)
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, json.loads(res.stdout)


def _cursor(conn, source: str, *, ago: str = "0 s", error: str | None = None, cursor: str = "1") -> None:
    conn.execute("INSERT INTO net.cursor (source, cursor, last_success_at, last_error, last_error_at, updated_at) "
                 "VALUES (%s, %s, now() - %s::interval, %s, CASE WHEN %s::text IS NULL THEN NULL ELSE now() END, "
                 "now())", (source, cursor, ago, error, error))


def _alert(conn, key: str, severity: str) -> None:
    conn.execute("INSERT INTO alert.state (alert_key, rule, severity, status, summary, first_fired_at, last_seen_at, "
                 "last_evaluated_at) VALUES (%s, %s, %s, 'firing', 'a finding', now(), now(), now())",
                 (key, key.split(":")[0], severity))


def test_a_database_without_the_schema_is_not_healthy(empty_db_url):
    res = status(empty_db_url)
    assert res.returncode == 1, res.stderr
    assert "NOT HEALTHY" in res.stdout and "the schema is not created: run `indexer migrate`" in res.stdout


def test_an_empty_migrated_database_is_healthy(db_url):
    res = status(db_url)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "health      healthy" in res.stdout and "last cycle  none yet" in res.stdout
    assert "epochs      none yet" in res.stdout and "alerts      none firing" in res.stdout
    code, body = as_json(db_url)
    assert code == 0 and body["healthy"] is True and body["reasons"] == [] and body["last_cycle"] is None


def test_a_stale_cursor_is_not_healthy_and_the_limit_is_the_ready_one(db_url, conn):
    _cursor(conn, "chain", cursor="7")
    _cursor(conn, "escrow:1971", ago="2 hours")
    res = status(db_url)
    assert res.returncode == 1
    assert "1 source(s) lag more than 900 s: escrow:1971 (2.0h)" in res.stdout
    assert "  escrow:1971: cursor 1, lag 2.0h" in res.stdout
    assert status(db_url, "--ready-max-lag", "10800").returncode == 0
    # the same limit from the environment, as `indexer run`'s /ready reads it
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {"INDEXER_READY_MAX_LAG": "10800"}
    again = subprocess.run([sys.executable, "-m", "indexer", "status", "--database-url", db_url], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout


def test_a_failed_last_cycle_is_not_healthy(db_url, conn):
    _cursor(conn, "chain", cursor="7", error="cycle failed: ConnectError: chain REST unreachable")
    res = status(db_url)
    assert res.returncode == 1
    assert re.search(r"the last poll cycle failed \d+s ago: cycle failed: ConnectError: chain REST unreachable$",
                     res.stdout, re.M)
    assert re.search(r"^last cycle  FAILED \d+s ago \(last success \d+s ago\): cycle failed: ConnectError", res.stdout,
                     re.M)
    code, body = as_json(db_url)
    assert code == 1 and body["last_cycle"]["outcome"] == "failed" and body["last_cycle"]["epoch"] == "7"
    # a cycle that succeeds clears the error (indexer.poller.store UPSERT_CURSOR): healthy again
    conn.execute("UPDATE net.cursor SET last_error = NULL, last_error_at = NULL WHERE source = 'chain'")
    res = status(db_url)
    assert res.returncode == 0 and re.search(r"^last cycle  ok, last success \d+s ago, chain at epoch 7$", res.stdout,
                                             re.M)


def test_a_firing_alert_is_not_healthy_unless_below_fail_on_or_silenced(db_url, conn):
    _alert(conn, "disputable_penalty:gonka1x:5", "warning")
    _alert(conn, "governance_limit_changed:5", "info")
    res = status(db_url)
    assert res.returncode == 1
    assert "1 alert(s) firing at warning or above: disputable_penalty (warning) x1" in res.stdout
    assert "firing: disputable_penalty (warning) x1, governance_limit_changed (info) x1" in res.stdout
    assert status(db_url, "--fail-on", "critical").returncode == 0
    assert status(db_url, "--fail-on", "none").returncode == 0
    assert status(db_url, "--fail-on", "info").returncode == 1
    conn.execute("INSERT INTO alert.silence (rule, ends_at) VALUES ('disputable_penalty', now() + interval '1 hour')")
    res = status(db_url)
    assert res.returncode == 0 and "disputable_penalty (warning) x0 +1 silenced" in res.stdout


def test_a_peer_s_error_text_cannot_drive_the_terminal(db_url, conn):
    _cursor(conn, "escrow:1971", error="host said \x1b[2J\x1b]0;pwned\x07" + "x" * 5000)
    res = status(db_url)
    assert "\x1b" not in res.stdout and "\\x1b[2J" in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) < 400


def test_the_database_password_is_never_shown(db_url):
    password = urlsplit(db_url).password
    assert password  # the test server wants one
    res = status(db_url)
    assert res.returncode == 0, res.stdout + res.stderr
    assert password not in res.stdout + res.stderr and ":***@" in res.stdout
    # libpq also takes the password as a query parameter
    parts = urlsplit(db_url)
    in_query = parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}",
                              query=f"connect_timeout=9&password={password}").geturl()
    res = status(in_query)
    assert res.returncode == 0, res.stdout + res.stderr
    assert password not in res.stdout + res.stderr and "?connect_timeout=9&password=***" in res.stdout


def test_no_database_is_exit_2_on_one_line(tmp_path):
    res = status("postgresql://indexer:hunter2@127.0.0.1:1/none", home=tmp_path)
    assert res.returncode == 2
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot connect to postgresql://") and "hunter2" not in lines[0]


def test_status_after_the_demo(demo_db_url):
    # the demo polled the devnet and its alerts ran once: the disputable penalties it finds are firing alerts
    code, body = as_json(demo_db_url, "--ready-max-lag", "1e9")
    classes = {s["class"] for s in body["sources"]}
    assert {"chain", "epoch", "escrow"} <= classes
    assert body["last_cycle"]["outcome"] == "ok" and int(body["last_cycle"]["epoch"]) >= 3
    assert sum(e["count"] for e in body["epochs"]) >= 3 and any(e["state"] == "final" for e in body["epochs"])
    assert code == 1 and len(body["reasons"]) == 1 and "alert(s) firing at warning or above" in body["reasons"][0]
    assert {a["rule"] for a in body["alerts_firing"]} >= {"disputable_penalty"}
    res = status(demo_db_url, "--ready-max-lag", "1e9", "--fail-on", "none")
    assert res.returncode == 0, res.stdout
    assert "health      healthy" in res.stdout and "last cycle  ok" in res.stdout
    assert all(len(line) <= 300 for line in res.stdout.splitlines())


def test_escrows_per_evidence_level_and_those_that_failed(db_url, conn, tmp_path):
    from tests.support.restitution_kit import small_escrow
    from tests.support.rules_kit import load

    load(db_url, tmp_path, [r for e in ("8101", "8102", "8103") for r in small_escrow(e, 600, invalid=0, served=2)])
    conn.execute("DELETE FROM replay.escrow_verification")  # the stage's rows (no signed log); set here by hand
    conn.execute("INSERT INTO replay.escrow_verification (escrow_id, level, failed_check, failed_nonce, failure) "
                 "VALUES ('8101', 'settled', NULL, NULL, NULL), ('8102', 'signed', 'replayed', 4, 'root differs')")
    res = status(db_url)
    assert "escrows     verified to settled 1, replayed 0, signed 1, none 1; 1 failed a check " \
           "(api.escrow_verification)\n" in res.stdout
    _, body = as_json(db_url)
    assert body["escrows_by_evidence_level"] == [
        {"level": "none", "escrows": 1, "failed_a_check": 0}, {"level": "signed", "escrows": 1, "failed_a_check": 1},
        {"level": "replayed", "escrows": 0, "failed_a_check": 0}, {"level": "settled", "escrows": 1,
                                                                    "failed_a_check": 0}]
    # a schema from before verification still answers the rest of the screen, without the line
    conn.execute("DROP VIEW api.escrow_verification")
    res = status(db_url)
    assert res.returncode in (0, 1), res.stderr
    assert "alerts      " in res.stdout and "escrows     verified" not in res.stdout


def test_payloads_awaited_and_given_up_are_counted(db_url, conn):
    code, body = as_json(db_url)
    assert body["payloads"] == {"awaited": 0, "given_up": 0}
    conn.execute("INSERT INTO net.awaited_payload (escrow_id, inference_id, epoch_index, protocol_version, record, "
                 "next_attempt_at, given_up_at) VALUES ('7', 1, 3, 'v5', '{}', now(), NULL), "
                 "('7', 2, 3, 'v5', '{}', now(), NULL), ('8', 1, 3, 'v5', '{}', now(), now())")
    res = status(db_url)
    assert res.returncode == 0, res.stdout + res.stderr  # a given-up payload is shown, not a health failure
    assert "payloads    2 awaited (asked again each cycle), 1 given up" in res.stdout
    code, body = as_json(db_url)
    assert code == 0 and body["payloads"] == {"awaited": 2, "given_up": 1}

"""`python -m indexer` as a user runs it: exit codes, the database URL, stdin."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from indexer.db.embedded import EmbeddedCluster
from tests.support.helpers import escrow, tx

ROOT = Path(__file__).resolve().parents[2]


def run(*args, stdin: bytes | None = None, env: dict | None = None, home: Path | None = None):
    base = {**os.environ, "COLUMNS": "200"}
    base.pop("DATABASE_URL", None)
    if home is not None:  # never start an embedded cluster in the working tree by accident
        base["INDEXER_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "indexer", *args], cwd=ROOT, env={**base, **(env or {})},
                          input=stdin, capture_output=True, timeout=120)


def test_missing_input_file_is_bad_input(db_url, tmp_path, conn):
    res = run("--database-url", db_url, "ingest", str(tmp_path / "absent.ndjson"), "--no-progress")
    assert res.returncode == 2
    assert b"absent.ndjson" in res.stderr and b"no such file" in res.stderr
    assert conn.execute("SELECT count(*) FROM rec.source").fetchone() == (0,)


def test_empty_epoch_range_is_bad_usage(tmp_path):
    res = run("--database-url", "postgresql://nobody@127.0.0.1:1/none", "export", "--epochs", "5..3",
              str(tmp_path / "out.ndjson"), home=tmp_path)
    assert res.returncode == 2
    assert b"--epochs" in res.stderr
    assert not (tmp_path / "out.ndjson").exists()


def test_malformed_epoch_range_is_bad_usage(tmp_path):
    res = run("--database-url", "postgresql://nobody@127.0.0.1:1/none", "export", "--epochs", "a..b",
              str(tmp_path / "out.ndjson"), home=tmp_path)
    assert res.returncode == 2


def test_db_url_prints_database_url_from_the_environment(db_url, tmp_path):
    res = run("db", "url", env={"DATABASE_URL": db_url}, home=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout.decode().strip() == db_url
    assert not (tmp_path / "pgdata").exists()  # no embedded cluster was started


def test_explicit_database_url_wins_over_the_environment(db_url, tmp_path):
    res = run("--database-url", db_url, "db", "url", env={"DATABASE_URL": "postgresql://other@127.0.0.1:1/x"},
              home=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout.decode().strip() == db_url


def test_ingest_from_stdin(db_url, tmp_path, conn):
    lines = [escrow(), tx("start", 100, 100), tx("confirm_start", 100, 101)]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in lines)
    res = run("--database-url", db_url, "ingest", "-", "--no-progress", stdin=data, home=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    assert conn.execute("SELECT uri, lines_committed, completed_at IS NOT NULL FROM rec.source").fetchall() == \
        [("stdin", 3, True)]
    assert conn.execute("SELECT status FROM api.inferences").fetchall() == [("Started",)]
    # the same bytes on stdin again are the same source: nothing changes
    again = run("--database-url", db_url, "ingest", "-", "--no-progress", stdin=data, home=tmp_path)
    assert again.returncode == 0
    assert conn.execute("SELECT count(*) FROM rec.source").fetchone() == (1,)
    assert conn.execute("SELECT max(revision) FROM rec.start_tx").fetchone() == (1,)


def test_database_url_option_after_the_subcommand(db_url, tmp_path, conn):
    # interface.md §1: every command takes --database-url
    path = tmp_path / "a.ndjson"
    path.write_bytes(json.dumps(escrow()).encode() + b"\n")
    res = run("ingest", str(path), "--no-progress", "--database-url", db_url, home=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    assert conn.execute("SELECT count(*) FROM rec.escrow").fetchone() == (1,)


def test_db_url_starts_the_embedded_server_and_db_stop_stops_it(tmp_path):
    home = tmp_path / "home"  # under an owner-only directory: as root the cluster itself lives in /var/lib
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {"INDEXER_HOME": str(home)}
    url = subprocess.run([sys.executable, "-m", "indexer", "db", "url"], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout.strip()
    with psycopg.connect(url) as conn:  # left running after the command exited, for psql and dashboards
        assert conn.execute("SELECT current_database()").fetchone() == ("indexer",)
    again = subprocess.run([sys.executable, "-m", "indexer", "db", "url"], capture_output=True, text=True, env=env,
                           timeout=120, check=True).stdout.strip()
    assert again == url  # reused, not a second server
    stop = subprocess.run([sys.executable, "-m", "indexer", "db", "stop"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert stop.returncode == 0 and "stopped" in stop.stderr
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=3)
    EmbeddedCluster(home).destroy()


def test_replay_all_replays_every_escrow_the_first_time(db_url, tmp_path, conn):
    # the marks must be committed before the pass: its worker processes claim them on their own connections
    lines = [escrow(), escrow("1972"), tx("start", 100, 100), tx("confirm_start", 100, 101),
             tx("start", 7, 1, escrow_id="1972")]
    path = tmp_path / "a.ndjson"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in lines))
    assert run("--database-url", db_url, "ingest", str(path), "--no-progress", home=tmp_path).returncode == 0
    before = dict(conn.execute("SELECT escrow_id, replayed_at FROM replay.escrow").fetchall())
    conn.commit()
    res = run("--database-url", db_url, "replay", "--all", home=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    assert b"replayed 2 escrows, 3 txs" in res.stdout + res.stderr
    after = dict(conn.execute("SELECT escrow_id, replayed_at FROM replay.escrow").fetchall())
    assert sorted(after) == ["1971", "1972"] and all(after[e] > before[e] for e in after)
    assert conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone() == (0,)


def test_a_byte_order_mark_before_stdin_s_first_line_is_ignored(db_url, tmp_path, conn):
    lines = [escrow(), tx("start", 100, 100)]
    data = b"\xef\xbb\xbf" + b"".join(json.dumps(r).encode() + b"\n" for r in lines)
    res = run("--database-url", db_url, "ingest", "-", "--no-progress", stdin=data, home=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    assert conn.execute("SELECT count(*) FROM rec.quarantine").fetchone() == (0,)
    assert conn.execute("SELECT escrow_id, inference_id FROM rec.start_tx").fetchall() == [("1971", 100)]


def test_version_prints_the_package_version_and_exits_0(tmp_path):
    from importlib.metadata import version

    res = run("--version", home=tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout.decode() == f"indexer {version('devshard-indexer')}\n"


def test_an_error_written_to_a_pipe_stays_on_one_line(tmp_path):
    # stderr is a pipe here, as in a log file or under cron: Rich would break the message at 80 columns
    bad = "mysql://someone@a-rather-long-host-name.example.internal:3306/a_database_name_that_is_long_too"
    res = run("--database-url", bad, "migrate", env={"COLUMNS": "80"}, home=tmp_path)
    assert res.returncode == 2
    lines = res.stderr.decode().splitlines()
    assert len(lines) == 1 and len(lines[0]) > 80, lines
    assert lines[0].startswith("error: --database-url is not a PostgreSQL URL") and "postgresql://" in lines[0]


def test_per_host_table_headers_are_whole_at_80_columns():
    from io import StringIO

    from rich.console import Console

    from indexer.reports.findings import Findings, print_report

    out = Console(width=80, file=StringIO(), force_terminal=False, color_system=None)
    host = "gonka1" + "q" * 38  # a real address's length
    print_report(Findings(epochs=[], hosts=[(12, host, 3, 4, 5, 6, 7, 8)], rules=[], verdicts=[], samples=[]), out)
    table = out.file.getvalue().split("Per host")[1].split("Disputable penalties by rule family")[0]
    assert "…" not in table and all(len(line) <= 80 for line in table.splitlines())
    header = [line.split("┃") for line in table.splitlines() if "┃" in line]
    words = [" ".join(filter(None, (row[i].strip() for row in header))) for i in range(len(header[0]))]
    assert words == ["epoch", "participant", "missed", "invalid", "disp. missed", "disp. invalid", "chain missed",
                     "chain invalid"]
    body = [line.split("│") for line in table.splitlines() if "│" in line]
    assert "".join(row[1].strip() for row in body) == host  # folded onto more lines, never cut

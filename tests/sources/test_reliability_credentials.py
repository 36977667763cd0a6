"""Issue 9 item 8: credentials in GONKA_CHAIN_REST_URL / GONKA_RPC_URL (https://user:pass@node/) are sent as HTTP
basic auth, and the password appears in no stored, logged or printed URL (net.*, api.ingest_status, stderr)."""
from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from indexer.sources.gonka.http import Fetcher

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-pw"


def _with_auth(url: str, user: str = "alice", password: str = SECRET) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}:{password}@{rest}"


class _AuthOnly(BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):  # noqa: N802
        _AuthOnly.seen.append(self.headers.get("Authorization"))
        want = "Basic " + base64.b64encode(f"al ice:{SECRET}@x".encode()).decode()
        body, status = (b'{"ok": true}', 200) if self.headers.get("Authorization") == want else (b"{}", 401)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_userinfo_is_sent_as_basic_auth_and_never_reported():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AuthOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    reported = []
    try:
        base = f"http://al%20ice:{SECRET}%40x@127.0.0.1:{server.server_address[1]}"
        fetcher = Fetcher(base, on_response=lambda url, *_: reported.append(url))
        assert fetcher.get_json("/status") == {"ok": True}
        fetcher.close()
    finally:
        server.shutdown()
    assert _AuthOnly.seen and _AuthOnly.seen[-1].startswith("Basic ")
    assert reported and all(SECRET not in u and "@" not in u for u in reported)
    assert all(SECRET not in u for u in fetcher.base_urls)


def _all_text(url: str) -> str:
    """Every text cell of every net.* table and of api.ingest_status."""
    out = []
    with psycopg.connect(url) as c:
        tables = [r[0] for r in c.execute("SELECT table_schema || '.' || table_name FROM information_schema.tables "
                                          "WHERE table_schema = 'net'")] + ["api.ingest_status"]
        for t in tables:
            out += [str(row) for row in c.execute(f"SELECT * FROM {t}")]
    return "\n".join(out)


def test_poller_with_credentials_in_urls_loads_and_stores_no_password(db_url):
    scn = Scenario(ScenarioConfig(seed=7, epochs=2, escrows_per_epoch=1, inferences_per_escrow=6))
    policy = RetryPolicy(attempts=1, backoff_base=0.0, sleep=lambda s: None)
    with DevnetServer(scn) as net:
        dead = _with_auth("http://127.0.0.1:1")  # fails first: its failure is recorded in net.failure
        summary = poll_once(db_url, [dead, _with_auth(net.chain_rest_url)], [_with_auth(net.rpc_url)], policy=policy,
                            private_hosts=True)
    assert summary.escrows > 0
    text = _all_text(db_url)
    assert "127.0.0.1:1" in text  # the failed endpoint was recorded ...
    assert SECRET not in text and "alice" not in text  # ... without its credentials


def test_cli_error_naming_a_url_hides_its_password(db_url, tmp_path):
    env = {**os.environ, "INDEXER_HOME": str(tmp_path), "GONKA_CHAIN_REST_URL": _with_auth("http://127.0.0.1:1"),
           "GONKA_RPC_URL": _with_auth("http://127.0.0.1:1")}
    env.pop("DATABASE_URL", None)
    res = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "run", "--once"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert "127.0.0.1:1" in res.stderr, res.stderr
    assert SECRET not in res.stderr
    assert SECRET not in _all_text(db_url)

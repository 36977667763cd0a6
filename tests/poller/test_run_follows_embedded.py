"""Issue 37 item 7: a running `indexer run` on the embedded server survives `indexer db stop` and a restart on
another port (the port was taken meanwhile): each cycle without a database prints one line, no traceback, and the
poller, /ready and the alert jobs find the server again."""
from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from indexer.db.embedded import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[2]


class Output:
    """The lines a process writes, read on a thread so waiting for one has a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(target=lambda: [self.lines.put(line) for line in proc.stdout], daemon=True)
        self.reader.start()

    def drain(self) -> str:
        """Everything written, once the process has exited."""
        self.reader.join(timeout=30)
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return "".join(self.seen)

    def wait_for(self, pattern: str, seconds: float = 120) -> re.Match:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
        pytest.fail(f"no line matching {pattern!r} within {seconds} s; output:\n{''.join(self.seen)[-4000:]}")


def _ready(address: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{address}/ready", timeout=10) as res:
            return res.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _until(check, seconds: float = 60) -> bool:
    """Poll `check` (an external process's state) until it holds or the deadline passes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_run_finds_the_embedded_server_again_after_a_stop_and_a_move():
    from indexer.devnet import DevnetServer, Scenario, ScenarioConfig

    home = Path(tempfile.mkdtemp(prefix="indexer-follow-"))
    cluster = EmbeddedCluster(home)
    cluster.url()
    first = int((home / "port").read_text())
    proc = None
    try:
        with DevnetServer(Scenario(ScenarioConfig(seed=7, epochs=1, escrows_per_epoch=1,
                                                  inferences_per_escrow=5))) as net:
            env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
            env |= {"INDEXER_HOME": str(home), "GONKA_CHAIN_REST_URL": net.chain_rest_url,
                    "GONKA_RPC_URL": net.rpc_url, "PYTHONUNBUFFERED": "1"}
            proc = subprocess.Popen([sys.executable, "-m", "indexer", "run", "--interval", "1", "--metrics-addr",
                                     "127.0.0.1:0", "--alerts-interval", "1", "--allow-private-hosts"], cwd=ROOT, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            out = Output(proc)
            address = out.wait_for(r"metrics on http://(\S+)/metrics").group(1)
            out.wait_for(r"^poll: epoch")

            cluster.stop()
            out.wait_for(r"poll cycle failed: the database is unreachable \(.+\); retrying in 1 s")
            out.wait_for(r"poll cycle failed: the database is unreachable")  # every cycle: one line each
            assert _ready(address) == 503
            with socket.socket() as squatter:  # another program takes the port meanwhile
                squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # closed connections linger
                squatter.bind(("127.0.0.1", first))
                squatter.listen()
                moved = urlsplit(cluster.url()).port
                assert moved != first
                out.wait_for(rf"the embedded PostgreSQL is now at postgresql://postgres:\*\*\*@127\.0\.0\.1:{moved}/")
                out.wait_for(r"^poll: epoch")
                assert _until(lambda: _ready(address) == 200), "/ready did not turn 200 on the new port"
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        text = out.drain()
        assert "Traceback" not in text, text[-4000:]
        assert re.search(r"alert (evaluation|delivery) failed: the database is unreachable", text), text[-4000:]
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        cluster.destroy()

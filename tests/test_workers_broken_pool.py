"""A worker pool whose worker dies while the call queue's pipe is full still lets the process exit (indexer.workers:
CPython gh-105829 hangs it for good in Python 3.11 releases before the fix, such as Debian 12's 3.11.2, which the
distribution's own Python runs). Run in a child process, bounded by a deadline."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import os, signal, time
from indexer import workers

def slow(payload):
    time.sleep(60)

if __name__ == "__main__":
    p = workers.pool(1)
    futures = [p.submit(slow, b"x" * (1 << 20)) for _ in range(8)]  # 1 MiB items: the call queue's pipe fills
    while not p._processes:
        time.sleep(0.01)
    for pid in list(p._processes):
        os.kill(pid, signal.SIGKILL)
    try:
        futures[0].result(timeout=30)
    except Exception as exc:
        print(type(exc).__name__, flush=True)
"""


def test_a_pool_broken_with_a_full_call_queue_lets_the_process_exit(tmp_path):
    script = tmp_path / "broken_pool.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=45)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "BrokenProcessPool"

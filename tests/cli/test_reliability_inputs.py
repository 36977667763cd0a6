"""Issue 9 item 12: bad input files are bad input (exit 2) with a message naming the file, and whatever loaded
before a bad file of a multi-file ingest is still replayed and evaluated."""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.helpers import escrow, tx, write_lines

ROOT = Path(__file__).resolve().parents[2]
START = tx("start", 100, 100, prompt_hash="ab" * 32, input_length=10, max_tokens=5)


def _cli(*args, prefix=()):
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("DATABASE_URL", None)
    return subprocess.run([*prefix, sys.executable, "-m", "indexer", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def _corrupt_gz(path: Path, lines: int = 5000) -> Path:
    """A gzip file whose stream breaks well after its first batch."""
    body = b"".join(f'{{"kind":"start","escrow_id":"9","inference_id":{i},"diff_nonce":{i}}}\n'.encode()
                    for i in range(lines))
    data = bytearray(gzip.compress(body))
    for i in range(len(data) // 2, len(data) - 8):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    return path


def test_corrupt_gzip_is_exit_2_naming_the_file(db_url, tmp_path):
    res = _cli("--database-url", db_url, "ingest", str(_corrupt_gz(tmp_path / "broken.ndjson.gz")), "--no-progress")
    assert res.returncode == 2, res.stderr
    assert "broken.ndjson.gz" in res.stderr and "gzip" in res.stderr


def test_a_directory_is_not_reported_as_missing(db_url, tmp_path):
    (tmp_path / "adir").mkdir()
    res = _cli("--database-url", db_url, "ingest", str(tmp_path / "adir"), "--no-progress")
    assert res.returncode == 2
    assert "adir: is a directory" in res.stderr


def test_a_named_pipe_is_read_like_stdin(db_url, tmp_path, conn):
    fifo = tmp_path / "pipe.ndjson"
    os.mkfifo(fifo)
    payload = b"\n".join(__import__("orjson").dumps(r) for r in (escrow(), START)) + b"\n"
    writer = threading.Thread(target=lambda: fifo.write_bytes(payload))
    writer.start()
    res = _cli("--database-url", db_url, "ingest", str(fifo), "--no-progress")
    if writer.is_alive():  # the command never opened the pipe: release the writer before failing
        with open(fifo, "rb") as fh:
            fh.read()
    writer.join(timeout=60)
    assert res.returncode == 0, res.stderr
    assert conn.execute("SELECT count(*) FROM api.inferences").fetchone() == (1,)


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="root reads any file without setpriv")
def test_an_unreadable_file_is_exit_2_naming_it(db_url, tmp_path, conn):
    path = write_lines(tmp_path / "secret.ndjson", [escrow()])
    path.chmod(0)
    # root reads every file through CAP_DAC_OVERRIDE: drop it, as an unprivileged user would not have it
    prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search",
              "--inh-caps=-dac_override,-dac_read_search") if os.geteuid() == 0 else ()
    res = _cli("--database-url", db_url, "ingest", str(path), "--no-progress", prefix=prefix)
    assert res.returncode == 2, res.stderr
    assert "secret.ndjson" in res.stderr and "Permission denied" in res.stderr
    assert conn.execute("SELECT count(*) FROM rec.source").fetchone() == (0,)


def test_files_before_a_bad_one_are_replayed_and_evaluated(db_url, tmp_path, conn):
    good = write_lines(tmp_path / "good.ndjson", [escrow(), START])
    bad = _corrupt_gz(tmp_path / "later.ndjson.gz")
    res = _cli("--database-url", db_url, "ingest", str(good), str(bad), "--no-progress", "--batch-lines", "500")
    assert res.returncode == 2, res.stderr
    assert "later.ndjson.gz" in res.stderr
    assert conn.execute("SELECT inference_id, status FROM api.inferences").fetchall() == [(100, "Pending")]
    assert conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM rules.dirty_epoch").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM rules.run").fetchone()[0] >= 1
    # the bad file is not marked complete: once repaired, a rerun loads it from its resume cursor
    assert conn.execute("SELECT completed_at IS NULL FROM rec.source WHERE uri LIKE '%%later.ndjson.gz'"
                        ).fetchone() == (True,)

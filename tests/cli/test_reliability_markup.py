"""Issue 9 item 11: Rich markup in data or file names (``[/]``) is printed as text by `indexer ingest`, `indexer
report` and the CLI's error handler, never interpreted (it used to raise MarkupError and crash the command)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from indexer.synth import MODELS, generate, write_ndjson

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args):
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "indexer", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_markup_in_file_names_participants_and_model_ids_is_printed_as_text(db_url, tmp_path, conn):
    plain = tmp_path / "plain.ndjson"
    write_ndjson(str(plain), generate(seed=5, escrows=4, inferences=150, mix="adversarial"))
    data = plain.read_bytes().replace(b"gonka1host", b"gonka1[/]host")
    for model in MODELS:  # every model id gets a closing tag with nothing to close
        data = data.replace(model.encode(), f"[/]{model}[bold]".encode())
    path = tmp_path / "a[/]b.ndjson"  # a file "]b.ndjson" in a directory "a[": "/" cannot be in a file name
    path.parent.mkdir()
    path.write_bytes(data)

    res = _cli("--database-url", db_url, "ingest", str(path), "--no-progress", "--allow-quarantine")
    assert res.returncode == 0, res.stderr
    assert conn.execute("SELECT count(*) FROM api.disputable_penalties WHERE participant LIKE 'gonka1[/]host%'"
                        ).fetchone()[0] > 0

    res = _cli("--database-url", db_url, "report")
    assert res.returncode == 0, res.stderr
    assert "gonka1[/]host" in res.stdout
    assert "evidence" in res.stdout  # the per-rule examples (free text from the data) were printed too

    res = _cli("--database-url", db_url, "ingest", str(tmp_path / "a[/]gone.ndjson"), "--no-progress")
    assert res.returncode == 2
    assert "a[/]gone.ndjson" in res.stderr and "MarkupError" not in res.stderr

"""Issue 35 item 4: the hints a command prints name an `indexer` the user can paste, not one PATH may not find."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from indexer.cli.invocation import self_command


def test_the_script_is_named_relative_to_the_current_directory(tmp_path, monkeypatch):
    script = tmp_path / ".venv" / "bin" / "indexer"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    assert self_command(".venv/bin/indexer") == ".venv/bin/indexer"  # what `make demo` runs
    assert self_command(str(script)) == ".venv/bin/indexer"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert self_command(str(script)) == str(script)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")  # PATH finds this very script: its plain name
    assert self_command(str(script)) == "indexer"


def test_a_module_run_names_the_interpreter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    odd = tmp_path / "my venv" / "bin" / "python"
    assert self_command("/x/indexer/__main__.py", executable=str(odd)) == "'my venv/bin/python' -m indexer"
    assert self_command("/x/indexer/__main__.py", executable="/opt/py/bin/python") == "/opt/py/bin/python -m indexer"


def test_the_demo_hint_runs_as_printed(tmp_path):
    """`indexer demo --sample` through the venv's script, from a directory where PATH has no `indexer`: the printed
    psql hint's command substitution works when pasted."""
    script = Path(sys.executable).parent / "indexer"
    sample = tmp_path / "sample.ndjson"
    sample.write_text('{"kind": "epoch", "epoch_index": 1}\n')
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env |= {"PATH": "/usr/bin:/bin", "INDEXER_HOME": str(tmp_path / ".indexer")}
    from indexer.db.embedded import EmbeddedCluster

    try:
        res = subprocess.run([str(script), "demo", "--sample", str(sample)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        hint = next(line for line in (res.stdout + res.stderr).splitlines() if "query the views yourself" in line)
        inner = hint.split('"$(', 1)[1].split(')"', 1)[0]
        # the embedded server: the hint logs in as the reader, the script's path quoted for the shell as needed
        assert shlex.split(inner) == [str(script), "db", "url", "--reader"]
        url = subprocess.run(inner, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
        assert url.returncode == 0 and url.stdout.startswith("postgresql://indexer_reader:"), url.stderr
    finally:
        EmbeddedCluster(tmp_path / ".indexer").destroy()

"""`indexer report`: the terminal findings and the self-contained HTML page, from the api views."""
import re
import subprocess
import sys

from indexer.synth import generate, write_ndjson
from tests.helpers import ingest


def _load(db_url, tmp_path):
    path = tmp_path / "s.ndjson"
    write_ndjson(str(path), generate(seed=5, escrows=4, inferences=150, mix="adversarial"))
    ingest(db_url, path, rules=True)


def test_html_report_is_self_contained_with_charts(db_url, tmp_path):
    _load(db_url, tmp_path)
    out = tmp_path / "report.html"
    run = subprocess.run([sys.executable, "-m", "indexer", "report", "--database-url", db_url, "--html", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    page = out.read_text()
    assert page.count("<svg") == 2  # penalties per host and epoch; verdict mix per model
    assert "invalidated_context_refusal" in page
    assert not re.search(r"""(src|href)=["']https?://""", page)  # nothing fetched from elsewhere


def test_terminal_report_lists_epochs_hosts_and_rule_families(db_url, tmp_path):
    _load(db_url, tmp_path)
    run = subprocess.run([sys.executable, "-m", "indexer", "report", "--database-url", db_url, "--epochs", "400"],
                         capture_output=True, text=True, timeout=120, env={"COLUMNS": "160", "PATH": ""})
    assert run.returncode == 0, run.stderr
    assert "Disputable penalties by rule family" in run.stdout
    assert "gonka1host" in run.stdout and "401" not in run.stdout.split("Per host")[1].split("Disputable")[0]

"""`indexer report`: the terminal findings and the self-contained HTML page, from the api views."""
import re
import subprocess
import sys

import psycopg

from indexer.synth import generate, write_ndjson
from tests.support.helpers import ingest


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
    with psycopg.connect(db_url) as conn:
        epochs = conn.execute("SELECT count(DISTINCT epoch_index) FROM api.host_epoch_penalties").fetchone()[0]
        penalties = conn.execute("SELECT count(*) FROM api.disputable_penalties").fetchone()[0]
    assert page.count('<section class="card">') == epochs  # one summary per epoch
    assert page.count('<svg class="bar"') == epochs and 'id="heatmap"' in page
    assert page.count("<tr data-host=") == penalties  # every disputable penalty, with its evidence
    assert "invalidated_context_refusal" in page and "<details><summary>evidence</summary>" in page
    assert not re.search(r"""(src|href)=["']https?://""", page)  # nothing fetched from elsewhere


def test_terminal_report_lists_epochs_hosts_and_rule_families(db_url, tmp_path):
    _load(db_url, tmp_path)
    run = subprocess.run([sys.executable, "-m", "indexer", "report", "--database-url", db_url, "--epochs", "400"],
                         capture_output=True, text=True, timeout=120, env={"COLUMNS": "160", "PATH": ""})
    assert run.returncode == 0, run.stderr
    assert "Disputable penalties by rule family" in run.stdout
    # each example is its rule's sentence with the arithmetic, not raw JSON cut at a fixed width
    assert "governance limit" in run.stdout and '"refusal_kind"' not in run.stdout
    assert "gonka1host" in run.stdout and "401" not in run.stdout.split("Per host")[1].split("Disputable")[0]

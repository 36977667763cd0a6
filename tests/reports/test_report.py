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


def _html_page(db_url: str, tmp_path) -> str:
    """The HTML report of the loaded findings, written by the command as a user runs it."""
    _load(db_url, tmp_path)
    out = tmp_path / "report.html"
    run = subprocess.run([sys.executable, "-m", "indexer", "report", "--database-url", db_url, "--html", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return out.read_text()


def test_html_report_is_self_contained_with_charts(db_url, tmp_path):
    page = _html_page(db_url, tmp_path)
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


def _ascending(values) -> bool:
    values = [int(v) for v in values]
    return values == sorted(values)


def test_html_report_one_epoch_order_and_host_and_epoch_filter(db_url, tmp_path):
    page = _html_page(db_url, tmp_path)
    cards = re.findall(r'<section class="card"><h3>Epoch (\d+)</h3>', page)
    heat = page.split('id="heatmap"')[1].split("</svg>")[0]
    columns = re.findall(r'<text x="[\d.]+" y="15" class="ax" text-anchor="middle">(\d+)</text>', heat)
    rows = re.findall(r'<tr data-host="[^"]*" data-epoch="(\d+)"', page)
    limits = re.findall(r"<tr><td>(\d+)</td>", page.split('id="limits"')[1].split("</table>")[0])
    assert len(set(cards)) > 1 and cards == columns  # one card and one heatmap column per epoch, same order
    for section in (cards, columns, rows, limits):
        assert section and _ascending(section), section
    # every heatmap cell and every penalty row names its host and its epoch; the filter compares both
    assert heat.count('<g class="cell"') == len(re.findall(r'<g class="cell" data-host="[^"]+" data-epoch="\d+"',
                                                           heat)) > 0
    assert page.count("<tr data-host=") == len(rows)
    assert "r.dataset.host===host.value" in page and "r.dataset.epoch===epoch" in page
    assert 'id="f-cell"' in page and ">show all</button>" in page


def test_html_report_restitution_epochs_ascend(db_url, tmp_path):
    from tests.reports.test_restitution_charts import downtime_373
    from tests.reports.test_restitution_report import _e366

    downtime_373(db_url, tmp_path)  # loaded first: the section's order is not the load order
    _e366(db_url, tmp_path)
    page = _html_page(db_url, tmp_path)
    cards = re.findall(r'<section class="card"><h3>Epoch (\d+)</h3>', page)
    restitution = re.findall(r"<h3>Epoch (\d+)</h3>", page.split('<section id="restitution">')[1])
    assert restitution == ["366", "373"] and _ascending(cards)
    assert page.count('class="chart sprt-chart"') == 2 and page.count('class="chart downtime-chart"') == 1

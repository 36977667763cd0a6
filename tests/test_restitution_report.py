"""`indexer report --restitution` files (Markdown, CSV) and the --html section, on the E366-shaped case."""
from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

from indexer.restitution import collect, html_section, markdown, restitution_summary, rows_csv
from tests.rules_kit import load
from tests.test_restitution_db import X, gov_snapshot, params, small_escrow, summary

ROOT = Path(__file__).resolve().parents[1]


def _e366(db_url, tmp_path):
    recs = [gov_snapshot(epoch=366), params(366),
            summary(366, X, confirmation_weight=57537, inference_count=263, missed_requests=0,
                    invalidated_inferences=25, validated_inferences=238, excluded_reason="statistical_invalidations"),
            summary(366, "gonka1bystander", confirmation_weight=1000, inference_count=50, missed_requests=0)]
    load(db_url, tmp_path, recs + small_escrow("9001", 366, invalid=25, served=238, disputable=5))


def test_markdown_csv_and_line(db_url, tmp_path):
    _e366(db_url, tmp_path)
    (case,) = collect(db_url, (366, 366))
    assert [r["participant"] for r in case.candidates] == [X]
    md = markdown(case)
    assert "| `gonka1hostX` | direct: invalidation SPRT exclusion (statistical_invalidations) | **37,609.316890** " \
           "| 37,609,316,890,103 |" in md
    assert "## What this report does not claim" in md and "Delegation transfers" in md
    assert "| invalidation_h_threshold (H) | 4 |" in md
    assert md.count("| 9001 |") == 5                      # the five disputed invalidations, one row each
    assert "| `gonka1hostX` | issue_2078 | 0 | 20 | yes | no |" in md
    rows = list(csv.DictReader(io.StringIO(rows_csv(case))))
    assert len(rows) == 1
    assert (rows[0]["amount_gonka"], rows[0]["amount_ngonka"], rows[0]["flipped_test"]) == \
        ("37609.316890", "37609316890103", "sprt")
    lines = restitution_summary([case]).splitlines()
    assert lines[0] == "restitution: 1 host epoch outcome(s) flip without the disputable penalties"
    assert lines[1] == "  epoch 366 gonka1hostX" and lines[2].startswith("    SPRT max LLR 4.46 → ")
    assert lines[3] == "    at stake: 37,609.316890 GONKA (37,609,316,890,103 ngonka)"
    fragment, data = html_section([case])
    assert "<svg" in fragment and "H = 4" in fragment
    series = data["366"][X]
    assert series["current"][0][0] == "9001" and round(float(series["current"][0][1]), 2) == 4.46
    assert float(series["without_disputable"][0][1]) < 4


def test_cli_writes_files(db_url, tmp_path):
    _e366(db_url, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    out = tmp_path / "reports"
    res = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "report", "--restitution",
                          "--epochs", "366", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr.decode()
    assert sorted(p.name for p in out.iterdir()) == ["restitution-366.csv", "restitution-366.md"]
    assert "  epoch 366 gonka1hostX\n" in res.stdout.decode() + res.stderr.decode()
    page = tmp_path / "page.html"
    res = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "report", "--html", str(page)],
                         cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr.decode()
    text = page.read_text()
    assert '<section id="restitution">' in text and 'id="restitution-data"' in text

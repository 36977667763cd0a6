"""`indexer report --restitution` files (Markdown, CSV) and the --html section, on the E366-shaped case."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg

from indexer.reports.restitution import collect, html_section, markdown, restitution_summary, rows_csv
from tests.support.rules_kit import gov_snapshot, load
from tests.support.restitution_kit import REST_OF_366, X, params, small_escrow, summary

ROOT = Path(__file__).resolve().parents[2]


def _e366(db_url, tmp_path):
    recs = [gov_snapshot(epoch=366), params(366),
            summary(366, X, confirmation_weight=57537, weight=60000, raw_confirmation_weight=59000,
                    inference_count=263, missed_requests=0, invalidated_inferences=25, validated_inferences=238,
                    excluded_reason="statistical_invalidations"),
            summary(366, "gonka1bystander", **REST_OF_366, inference_count=50, missed_requests=0)]
    with psycopg.connect(db_url, autocommit=True) as c:  # the anchor's share is the v0.2.12 rule (test_restitution_db)
        c.execute("INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason) "
                  "VALUES (366, 366, 'v0.2.12', 'test')")
    load(db_url, tmp_path, recs + small_escrow("9001", 366, invalid=25, served=238, disputable=5))


def test_markdown_csv_and_line(db_url, tmp_path):
    _e366(db_url, tmp_path)
    (case,) = collect(db_url, (366, 366))
    assert [r["participant"] for r in case.candidates] == [X]
    md = markdown(case)
    assert "| `gonka1hostX` | direct: invalidation SPRT exclusion (statistical_invalidations) | 37,609.316890 " \
           "| **37,609.316890** | 37,609,316,890,103 | confirmation\\_capped |" in md
    assert "## What this report does not claim" in md and "Delegation transfers" in md
    assert "| invalidation_h_threshold (H) | 4 |" in md
    assert md.count("Escrow `9001`") == 5                 # the five disputed invalidations, one item each
    assert "| `gonka1hostX` | issue\\_2078 | 0 | 20 | yes | no |" in md
    # the bystander executed nothing: its SPRT cannot be evaluated, so it is listed as undecided, with the reason
    assert "| `gonka1bystander` | invalidation SPRT: no replayed escrow results for this host in the epoch |" in md
    rows = {r["participant"]: r for r in csv.DictReader(io.StringIO(rows_csv(case)))}
    assert set(rows) == {X, "gonka1bystander"}            # one row per host examined
    x = rows[X]
    assert (x["outcome"], x["amount_gonka"], x["amount_ngonka"], x["flipped_test"], x["weight_basis"]) == \
        ("restitution", "37609.316890", "37609316890103", "sprt", "confirmation_capped")
    assert x["disputable_penalties"].count("Invalidated context refusal") == 5
    assert len(json.loads(x["disputable_evidence_json"])) == 5
    assert rows["gonka1bystander"]["outcome"] == "unknown" and rows["gonka1bystander"]["unknown_reason"]
    lines = restitution_summary([case]).splitlines()
    assert lines[0] == "restitution: 1 host epoch outcome(s) flip without the disputable penalties"
    assert lines[1] == "  epoch 366 gonka1hostX" and lines[2].startswith("    SPRT max LLR 4.46 → ")
    assert lines[3] == "    to restitute: 37,609.316890 GONKA (37,609,316,890,103 ngonka)"
    assert lines[4] == "    evidence level: none (below settled)"  # no escrow verified yet
    assert lines[5] == "  1 host-epoch(s) could not be evaluated (see the reports' \"Hosts that could not be evaluated\")"
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


def test_tests_not_computed_are_named(db_url, tmp_path):
    # chain v0.2.4 decided invalidations with a float z-score: the SPRT is not computed, the host is undecided
    recs = [gov_snapshot(epoch=367), params(367),
            summary(367, X, confirmation_weight=1000, weight=1000, inference_count=263, missed_requests=0)]
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason) "
                  "VALUES (367, 367, 'v0.2.4', 'test')")
    load(db_url, tmp_path, recs + small_escrow("9011", 367, invalid=2, served=50, disputable=1))
    (case,) = collect(db_url, (367, 367))
    md = markdown(case)
    assert "## Tests not computed for this epoch" in md and "consecutive-failures rule" in md
    assert "- Chain v0.2.4 decided invalidations with a float z-score, not the SPRT" in md
    assert [r["restitution_candidate"] for r in case.rows] == [None]

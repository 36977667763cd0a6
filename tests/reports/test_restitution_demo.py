"""The restitution report and the dashboards on the demo's data (`demo_db_url`, read-only): every epoch's report is
complete and self-consistent, the evidence is whole, the excluded and undecided hosts are listed apart, and every
money panel's SQL agrees with the report's figures."""
from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal

import psycopg
import pytest

from deploy.grafana.build_dashboards import DASHBOARDS
from indexer.devnet.keys import host_address
from indexer.reports.restitution import collect, markdown, rows_csv
from indexer.reports.restitution.markdown import code, fenced, md, _csv_cell
from indexer.reports.restitution.render import gonka


HOST_A, HOST_C, HOST_E = (host_address(2078, f"host{x}") for x in "ACE")  # the demo's seed


@pytest.fixture(scope="module")
def cases(demo_db_url):
    return collect(demo_db_url)


def test_every_epoch_report_is_complete(cases):
    assert [c.epoch for c in cases] == [408, 409, 410]
    for case in cases:
        text = markdown(case)
        assert f"Hosts examined: {len(case.rows)} " in text
        for header in ("## Summary", "## How the amounts are computed", "## Hosts the chain excluded",
                       "## Hosts that could not be evaluated", "## Disputable penalties of the hosts above",
                       "## Parameters in force", "## Tests not computed for this epoch",
                       "## What this report does not claim", "## Rule variants"):
            # every section has a body: the next non-blank line after a section header is never another section
            after = text.split(header + "\n", 1)[1].lstrip("\n")
            assert after and not after.startswith("## "), (case.epoch, header)
        # hostC: excluded for statistical_invalidations in every epoch, listed with the chain's reason, the
        # indexer's own verdict and the test without the disputable penalties
        row = re.search(rf"\| `{HOST_C}` \| statistical\\_invalidations \| (no \(max LLR [0-9.]+ < H [0-9]+\)) \|"
                        r" ([0-9.]+) → ([0-9.]+) \(", text)
        assert row, case.epoch
        assert Decimal(row.group(3)) < Decimal(row.group(2))
        assert f"| `{HOST_C}` | invalidation SPRT: the chain excluded the host" in text  # undecided, with why
    e408 = next(c for c in cases if c.epoch == 408)
    assert "3.2938 → 0.2509 (4)" in markdown(e408)  # 16 finalizing nonces per escrow: one more assigned per slot
    # the devnet pays by the chain's rule (hosts that fail the downtime test or are excluded get nothing): every
    # payout of the epoch is the rule's
    assert "of the 4 hosts the chain paid in this epoch (epoch_performance_summary.rewarded_coins), the rule gives " \
           "exactly the amount paid for 4.\n" in markdown(e408)
    assert "No host's epoch outcome is shown to change" in markdown(e408)


def test_evidence_is_whole_and_each_verdict_a_sentence(cases):
    seen = 0
    for case in cases:
        text = markdown(case)
        blocks = re.findall(r"```json\n   (.*?)\n   ```", text)
        assert len(blocks) == len(case.penalties)
        for block, p in zip(blocks, case.penalties):
            assert json.loads(block) == json.loads(json.dumps(p["evidence"], default=str))  # never cut
            seen += 1
    assert seen > 0
    e408 = markdown(next(c for c in cases if c.epoch == 408))
    assert ("sibling inference 48's signed input 318,037 + max\\_tokens 1,024 = 319,061 \\> governance limit "
            "180,000") in e408
    assert ("prompt at least 261,121 + max\\_tokens 1,024 = 262,145 ≤ governance limit 400,000 (epoch snapshot, "
            "model args)") in e408


def test_csv_has_every_host_and_the_amounts(cases):
    for case in cases:
        rows = list(csv.DictReader(io.StringIO(rows_csv(case))))
        assert len(rows) == len(case.rows)
        assert {r["outcome"] for r in rows} <= {"restitution", "no change", "unknown"}
        for r in rows:
            if r["outcome"] == "no change":
                assert r["amount_ngonka"] == "0"
            if r["outcome"] == "unknown":
                assert r["amount_ngonka"] == "" and r["unknown_reason"]


def test_reward_if_passed_is_kept_and_only_flips_are_restituted(demo_db_url):
    with psycopg.connect(demo_db_url) as c:
        rows = c.execute("SELECT epoch_index, participant, reward_if_passed, reward_at_stake, restitution_amount, "
                         "restitution_candidate, weight_basis FROM api.restitution_impact").fetchall()
    host_a = next(r for r in rows if r[:2] == (408, HOST_A))
    assert host_a[2] > 0 and host_a[3] == host_a[2] and host_a[4] == 0 and host_a[5] is False
    assert all(r[6] == "full" for r in rows)  # the devnet publishes empty confirmation_weight_scales
    with psycopg.connect(demo_db_url) as c:  # hostG holds 222,000 of 1,477,000 (15 %): no cap binds
        assert c.execute("SELECT bool_or(power_cap_may_bind), bool_and(power_cap_may_bind IS NOT NULL) "
                         "FROM api.restitution_impact").fetchone() == (False, True)
    paid = [(r[0], r[1], r[4]) for r in rows if r[4]]
    assert paid == [(410, HOST_E, 44_658_193_112_794)]


def _panel_sql(title: str) -> str:
    for dash in DASHBOARDS.values():
        for panel in dash["panels"]:
            if panel["title"] == title:
                return panel["targets"][0]["rawSql"]
    raise AssertionError(title)


def test_money_panels_agree_with_the_report(demo_db_url, cases):
    """Every panel that shows GNK sums exactly what the reports ask to pay, epoch by epoch."""
    money = [p["title"] for d in DASHBOARDS.values() for p in d["panels"] if "GNK" in p["title"]]
    assert money == ["Amount to restitute per epoch (GNK)"]
    with psycopg.connect(demo_db_url) as c:
        got = {int(r[0]): (r[1], r[2], r[3]) for r in c.execute(_panel_sql(money[0])).fetchall()}
    for case in cases:
        total = sum((r["restitution_amount"] or 0) for r in case.candidates)
        gnk, candidates, undecided = got[case.epoch]
        assert gnk == Decimal(total) / Decimal(10) ** 9
        assert (candidates, undecided) == (len(case.candidates), len(case.unknown))
        summary = markdown(case).split("## How the amounts", 1)[0]
        if total:
            assert f"| **Total** |  |  | **{gonka(total)}** |" in summary
        else:
            assert "No host's epoch outcome is shown to change" in summary
    assert got[408][0] == 0 and got[410][0] == Decimal("44658.193112794")


def test_sinks_escape_what_came_from_the_network():
    assert md("a|b <script> *x* `y`") == "a\\|b \\<script\\> \\*x\\* \\`y\\`"
    assert md("two\nlines") == "two lines"
    assert code("gonka1`evil") == "`gonka1'evil`"
    assert fenced('{"k": "```"}') == ["````json", '{"k": "```"}', "````"]
    assert [_csv_cell(v) for v in ("=HYPERLINK(1)", "+1", "-1", "@x", "ok", None, 5)] == \
        ["'=HYPERLINK(1)", "'+1", "'-1", "'@x", "ok", "", 5]

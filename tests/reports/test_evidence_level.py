"""The evidence level (how far each escrow's log was verified, replay.escrow_verification) wherever a decision is made:
api.disputable_penalties and api.restitution_impact, the restitution Markdown, CSV and proposal, the HTML page and the
terminal report. Verification rows are written directly (the stage that writes them runs elsewhere) for the escrows
of the E366-shaped case, on the real pipeline and a real PostgreSQL."""
from __future__ import annotations

import csv
import functools
import io
import re
from io import StringIO

import psycopg
import pytest
from rich.console import Console

from indexer.reports import findings, html
from indexer.reports.restitution import collect, html_section, markdown, restitution_summary, rows_csv
from indexer.reports.restitution.collect import EpochCase
from indexer.reports.restitution.proposal import build
from indexer.verify.signatures import bech32_encode
from tests.support.restitution_kit import REST_OF_366, X, params, small_escrow, summary
from tests.support.helpers import set_verification
from tests.support.rules_kit import gov_snapshot, load

HOSTILE = "root 0xab <script>alert(1)</script> | *x* `y` =cmd\nsecond line " + "z" * 400


def _case(db_url, tmp_path, conn):
    """E366 with two more escrows of X: 9002 (one disputable invalidation) and 9003 (no disputable penalty)."""
    recs = [gov_snapshot(epoch=366), params(366),
            summary(366, X, confirmation_weight=57537, weight=60000, raw_confirmation_weight=59000,
                    inference_count=293, missed_requests=0, invalidated_inferences=26, validated_inferences=267,
                    excluded_reason="statistical_invalidations"),
            summary(366, "gonka1bystander", **REST_OF_366, inference_count=50, missed_requests=0)]
    conn.execute("INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason) "
                 "VALUES (366, 366, 'v0.2.12', 'test')")
    load(db_url, tmp_path, recs + small_escrow("9001", 366, invalid=25, served=238, disputable=5)
         + small_escrow("9002", 366, invalid=1, served=20, disputable=1) + small_escrow("9003", 366, invalid=0,
                                                                                           served=9))


_verify = functools.partial(set_verification, epoch=366, nonces=40, source_host="http://host-b")


def _levels(conn):
    penalties = dict(conn.execute("SELECT escrow_id, string_agg(DISTINCT evidence_level, ',') "
                                  "FROM api.disputable_penalties GROUP BY 1").fetchall())
    hosts = dict(conn.execute("SELECT participant, evidence_level FROM api.restitution_impact "
                              "WHERE epoch_index = 366").fetchall())
    return penalties, hosts


def test_level_order_is_one_definition_and_refuses_unknown_levels(conn):
    assert conn.execute("SELECT fn.evidence_levels(), fn.evidence_rank('none'), fn.evidence_rank('settled'), "
                        "fn.evidence_level(2), fn.evidence_rank(NULL), fn.evidence_level(NULL)").fetchone() == (
        ["none", "signed", "replayed", "settled"], 0, 3, "replayed", None, None)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown evidence level 'verified': the levels"):
        conn.execute("SELECT fn.evidence_rank('verified')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"evidence rank 4 is outside 0\.\.3"):
        conn.execute("SELECT fn.evidence_level(4)")


def test_views_carry_each_escrows_level_and_the_weakest_behind_a_host_epoch(db_url, tmp_path, conn):
    _case(db_url, tmp_path, conn)
    # nothing verified yet: every penalty is none; the bystander has no disputable penalty, so NULL (not none)
    assert _levels(conn) == ({"9001": "none", "9002": "none"}, {X: "none", "gonka1bystander": None})
    _verify(conn, "9001", "settled")
    _verify(conn, "9002", "replayed", "settled", None, "settlement root differs")
    _verify(conn, "9003", "signed", "replayed", 4, "post_state_root differs")
    assert _levels(conn) == ({"9001": "settled", "9002": "replayed"}, {X: "replayed", "gonka1bystander": None})
    _verify(conn, "9002", "settled")
    # 9003 (signed) has no disputable penalty: it does not weaken the row
    assert _levels(conn)[1] == {X: "settled", "gonka1bystander": None}
    conn.execute("DELETE FROM replay.escrow_verification WHERE escrow_id = '9001'")
    assert _levels(conn) == ({"9001": "none", "9002": "settled"}, {X: "none", "gonka1bystander": None})
    # the what-if variants: the level of the escrows whose penalties each removes (current removes none)
    assert dict(conn.execute("SELECT variant, evidence_level FROM api.restitution_outcomes "
                             "WHERE epoch_index = 366 AND participant = %s AND variant IN ('current', "
                             "'without_disputable')", (X,)).fetchall()) == {"current": None,
                                                                            "without_disputable": "none"}


def test_reports_show_the_level_and_why_it_is_below_settled_escaped(db_url, tmp_path, conn):
    _case(db_url, tmp_path, conn)
    _verify(conn, "9001", "settled")
    _verify(conn, "9002", "replayed", "settled", 21, HOSTILE)
    (case,) = collect(db_url, (366, 366))
    assert [(r["participant"], r["evidence_level"]) for r in case.candidates] == [(X, "replayed")]
    md = markdown(case)
    summary_table = md.split("## How the amounts", 1)[0]
    assert re.search(r"\| `gonka1hostX` \| direct: .* \| confirmation\\_capped \| replayed \(below settled\) \|",
                     summary_table)
    assert "Evidence: 0.000000 of the " in summary_table and "`gonka1hostX` (replayed (below settled))" in md
    items = re.findall(r"^\d+\. Escrow `(\d+)`.*$", md, re.M)
    assert sorted(set(items)) == ["9001", "9002"]
    line_9002 = next(x for x in md.splitlines() if x.startswith(tuple(f"{k}. Escrow `9002`" for k in range(1, 9))))
    assert "evidence level replayed (below settled)" in line_9002
    assert ("Evidence level replayed, below settled: every signed state root was recomputed, but the final one was "
            "not shown to be the root the chain settled; the settled check failed at nonce 21: root 0xab "
            "\\<script\\>alert(1)\\</script\\> \\| \\*x\\* \\`y\\` =cmd second line") in line_9002
    assert line_9002.endswith("z…."), line_9002[-40:]  # the reason cut at 200 characters
    line_9001 = next(x for x in md.splitlines() if re.match(r"\d+\. Escrow `9001`", x))
    assert "evidence level settled:" in line_9001 and "below settled" not in line_9001
    rows = {r["participant"]: r for r in csv.DictReader(io.StringIO(rows_csv(case)))}
    assert (rows[X]["evidence_level"], rows["gonka1bystander"]["evidence_level"]) == ("replayed", "")
    assert rows[X]["disputable_penalties"].count("Evidence level replayed, below settled") == 1
    assert "evidence level: replayed (below settled)" in restitution_summary([case])
    valid = bech32_encode("gonka", bytes(range(20)))  # the proposal pays real addresses only
    proposal = build([EpochCase(366, [dict(r, participant=valid) for r in case.candidates])], "1000ngonka")
    assert "evidence level replayed (below settled); evidence in restitution-366.md" in proposal["summary"]
    fragment, _ = html_section([case])
    assert '<td class="below" data-level="replayed">replayed (below settled)</td>' in fragment
    page = html.render_page(html.collect_page(db_url, (366, 366)))
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count('<td class="below" data-level="replayed">') == 1
    assert page.count('<td data-level="settled">settled</td>') == 5
    assert "of which on logs verified to settled" in page
    failed = page.split('id="verification-failures"')[1].split("</table>")[0]
    assert "<td>9002</td><td>settled</td><td>21</td>" in failed and "second line" in failed


def test_terminal_report_lists_levels_and_failed_escrows(db_url, tmp_path, conn):
    _case(db_url, tmp_path, conn)
    _verify(conn, "9002", "signed", "replayed", 7, "[bold]markup[/bold]\n" + "word " * 200)
    out = Console(width=200, file=StringIO(), force_terminal=False, color_system=None)
    findings.print_report(findings.collect(db_url, (366, 366)), out)
    text = out.file.getvalue()
    levels = text.split("Evidence behind the disputable penalties")[1]
    assert re.search(r"366 +│ none \(below settled\) +│ 5 +│ 1", levels)
    assert re.search(r"366 +│ signed \(below settled\) +│ 1 +│ 1", levels)
    failure = next(x for x in text.splitlines() if x.startswith("verification failed:"))
    assert failure.startswith("verification failed: escrow 9002 (epoch 366) failed the replayed check at nonce 7: "
                              "[bold]markup[/bold] word word")  # shown as written, not as Rich markup
    assert failure.endswith(" …") and len(failure) < 340


def test_evidence_note_per_level():
    from indexer.reports.restitution.verdicts import evidence_note

    assert evidence_note({"evidence_level": "settled"}) == "" and evidence_note({}) == ""
    assert evidence_note({"evidence_level": "none"}) == (
        "Evidence level none, below settled: the escrow's log was not verified, so the penalty rests on the log as "
        "the hosts served it.")
    assert evidence_note({"evidence_level": "signed", "failure": "protocol version v9: no\nported rules"}) == (
        "Evidence level signed, below settled: the user signed every diff, but the state roots were not recomputed "
        "from the log; verification stopped: protocol version v9: no ported rules.")
    assert evidence_note({"evidence_level": "replayed", "failed_check": "settled", "failed_nonce": None,
                          "failure": "2 of 3 host signatures"}).endswith(
        "; the settled check failed: 2 of 3 host signatures.")
    assert evidence_note({"evidence_level": "none", "failed_check": "records", "failed_nonce": 7,
                          "failure": "validation 3/2 valid is false in the record, true in the log"}) == (
        "Evidence level none, below settled: the tx records the penalty was derived from contradict the escrow's "
        "verified signed log; the records check failed at nonce 7: validation 3/2 valid is false in the record, true "
        "in the log.")


def test_a_settled_row_with_a_note_is_shown_as_weaker_than_settled(db_url, tmp_path, conn):
    """A settled verification row that carries a note (something the checks could not make, e.g. the approved
    versions not captured) is settled with a reservation in each sentence, and its amount is not counted as resting
    on logs verified to settled."""
    from indexer.reports.restitution.verdicts import evidence_note

    _case(db_url, tmp_path, conn)
    _verify(conn, "9001", "settled")
    _verify(conn, "9002", "settled")
    page = html.render_page(html.collect_page(db_url, (366, 366)))
    assert '<p>of which on logs verified to settled' in page
    note = "the approved versions and max_nonce were not checked: <b>no</b> params captured"
    _verify(conn, "9002", "settled", None, None, note)
    page = html.render_page(html.collect_page(db_url, (366, 366)))
    assert '<p class="below">of which on logs verified to settled: <b>0.000000 GONKA</b>' in page
    assert ("Evidence level settled, with a reservation: the approved versions and max_nonce were not checked: "
            "&lt;b&gt;no&lt;/b&gt; params captured.") in page
    assert evidence_note({"evidence_level": "settled", "failure": note}).startswith(
        "Evidence level settled, with a reservation: the approved versions")

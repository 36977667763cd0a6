"""Hostile peer values through the report sinks: the terminal report (`indexer report`), the restitution summary
line, the Markdown and CSV restitution files and the --html page. Each value is one a peer can choose (a participant
address, a model id, an escrow id, a verification failure's reason)."""
from __future__ import annotations

import io

from rich.console import Console

from indexer.reports.findings import Findings, print_report
from tests.reports.test_restitution_report import _e366

ESC = "\x1b[31mRED\x1b]0;pwned\x07\x1b[2J"  # colour, window title, clear screen
BIDI = "\u202eevil\u2066"
HOSTILE = f"gonka1{ESC}{BIDI}\x00\r\nsecond [bold]line[/] " + "z" * 1000


def _terminal(f: Findings) -> str:
    buf = io.StringIO()
    print_report(f, Console(file=buf, width=200, force_terminal=True, color_system="truecolor"))
    return buf.getvalue()


def _findings() -> Findings:
    return Findings(epochs=[(7, 1, 2, 0, 1)], hosts=[(7, HOSTILE, 1, 2, 0, 1, 1, 2)],
                    rules=[(7, HOSTILE, "over_limit", "invalid", 1)], verdicts=[],
                    samples=[(7, HOSTILE, 3, HOSTILE, "invalid", HOSTILE, "over_limit", {}, "none", "signed", 2,
                              HOSTILE)],
                    levels=[(7, HOSTILE, 1, 1)], failures=[(7, HOSTILE, HOSTILE, 2, HOSTILE, 0)])


def test_terminal_report_never_passes_a_peers_control_characters():
    out = _terminal(_findings())
    # Rich's own styling writes ESC [ ... m; a peer's sequences must not reach the terminal: no OSC (window
    # title), no clear screen, no BEL, no NUL, no CR, no bidi override
    for bad in ("\x1b]", "\x1b[2J", "\x1b[31mRED", "\x07", "\x00", "\r", "\u202e", "\u2066"):
        assert bad not in out, repr(bad)
    assert "gonka1\ufffd[31mRED" in out
    assert "[bold]line[/]" in out  # shown as the data is, not read as Rich markup
    assert "z" * 1000 not in out   # a value is bounded on its line
    assert "…" in out


def test_restitution_summary_line_is_one_line_per_field():
    from indexer.reports.restitution import restitution_summary
    from indexer.reports.restitution.collect import EpochCase

    row = {"participant": HOSTILE, "restitution_candidate": True, "flipped_test": "downtime",
           "disputable_missed": 3, "restitution_amount": 5, "evidence_level": "settled"}
    lines = restitution_summary([EpochCase(7, [row])]).splitlines()
    assert len(lines) == 5 and lines[1].startswith("  epoch 7 gonka1\ufffd[31mRED")
    assert "\x1b" not in lines[1] and "\u202e" not in lines[1] and len(lines[1]) < 250


def test_html_block_data_never_opens_a_script_escape():
    """The chart data is JSON inside <script>: "<!--<script>" in a participant would make the HTML parser read past
    the real "</script>" and swallow the rest of the page."""
    import json

    from indexer.reports.restitution import html_block
    from indexer.reports.restitution.collect import EpochCase

    who = '<!--<script></script>"&'
    row = {"participant": who, "restitution_candidate": True, "flipped_test": "sprt", "restitution_amount": 5,
           "evidence_level": "settled", "sprt_threshold": 4, "downtime_passes": True}
    block = html_block([EpochCase(7, [row])])
    payload = block.split('id="restitution-data">', 1)[1].removesuffix("</script>")
    assert "<" not in payload and list(json.loads(payload)["7"]) == [who]
    assert "<!--" not in block and "&lt;!--&lt;script&gt;" in block


# a participant a peer chose: pipes and backticks, control and bidi characters, an HTML entity of a bidi override,
# GFM strikethrough, a heading on a new line, and a megabyte
PEER = "gonka1|x`y\x1b[2J\u202e<b>&#x202e;~~s~~\n# h " + "z" * 1_000_000


def test_markdown_and_csv_with_a_hostile_participant(db_url, tmp_path):
    import csv
    import re

    from indexer.reports.restitution import collect, markdown, rows_csv
    from tests.support.restitution_kit import X

    _e366(db_url, tmp_path)
    (case,) = collect(db_url, (366, 366))
    rename = {X: PEER, "gonka1bystander": "=HYPERLINK(\"http://x\",\"y\")"}
    case.rows = [dict(r, participant=rename[r["participant"]]) for r in case.rows]
    reason = "&#x202e; ~~s~~ <img src=x onerror=alert(1)> | x\x1b[2J"  # prose (a code span keeps & literal)
    case.rows = [dict(r, unknown_reason=reason) if r["unknown_reason"] else r for r in case.rows]
    case.penalties = [dict(p, participant=rename[p["participant"]]) for p in case.penalties]
    text = markdown(case)
    for bad in ("\x1b", "\u202e", " &#x202e;", " ~~s~~", " <img", "\n# h", "z" * 1000):
        assert bad not in text, repr(bad)
    assert "\\&\\#x202e; \\~\\~s\\~\\~ \\<img src=x onerror=alert(1)\\> \\| x\ufffd\\[2J" in text
    assert len(text) < 200_000
    # every table row has as many cells as its header: no "|" of the data ends a cell
    cells = lambda line: len(re.findall(r"(?<!\\)\|", line))  # noqa: E731
    header = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
        elif header is None:
            header = cells(line)
        else:
            assert cells(line) == header, line[:200]
    from decimal import Decimal

    case.rows = [dict(r, sprt_max_llr=Decimal("-5"), missed=-5) for r in case.rows]
    rows = list(csv.DictReader(io.StringIO(rows_csv(case))))
    assert {r["participant"][:12] for r in rows} == {"'=HYPERLINK(", PEER[:12]}
    # numbers stay numbers: only text a spreadsheet would read as a formula gets the apostrophe
    assert {(r["sprt_max_llr"], r["missed"]) for r in rows} == {("-5", "-5")}
    cut = next(r["participant"] for r in rows if r["participant"].startswith("gonka1"))
    assert len(cut) <= 30_000 and cut.endswith("…")  # a spreadsheet cell holds 32,767 characters


def test_html_page_shows_hostile_values_as_text_that_cannot_reorder_the_page():
    from html.parser import HTMLParser

    from indexer.reports.html import Page, render_page

    who = '</td><script>alert(1)</script>"\'&\u202eevil\u2066\x00'
    p = Page(epochs=[7], hosts_by_epoch={7: (1, 1)}, rules_by_epoch={7: {who: 1}}, matrix={(who, 7): (1, 0)},
             penalties=[(7, who, who, 3, who, who, who, {"error": who}, "signed", who, 2, who)], total_penalties=1,
             limits=[(7, who, 4096, who, True, who)], levels=[(who, 1)], failures=[(7, who, who, 2, who)])
    page = render_page(p)
    for bad in ("<script>alert", "</td><script", "\u202e", "\u2066", "\x00"):
        assert bad not in page, repr(bad)

    class Scripts(HTMLParser):
        def __init__(self):
            super().__init__()
            self.scripts = 0

        def handle_starttag(self, tag, attrs):
            self.scripts += tag == "script"

    parser = Scripts()
    parser.feed(page)
    assert parser.scripts == 1  # the page's own


def test_html_page_bounds_a_megabyte_value_and_keeps_the_filter_matching():
    import re

    from indexer.reports.html import Page, render_page

    who = "gonka1" + "q" * 1_000_000
    p = Page(epochs=[7], hosts_by_epoch={7: (1, 1)}, rules_by_epoch={7: {"r": 1}}, matrix={(who, 7): (1, 0)},
             penalties=[(7, who, "9", 3, "invalid", "r", "over_limit", {}, "settled", None, None, None)],
             total_penalties=1)
    page = render_page(p)
    assert len(page) < 100_000 and "q" * 1000 not in page
    option = re.search(r'<select id="f-host"><option value="">all hosts</option><option value="([^"]*)"', page)[1]
    assert option.endswith("…") and f'<tr data-host="{option}"' in page and f'data-host="{option}" data-epoch' in page


def test_terminal_report_shows_emoji_codes_in_data_as_written():
    """Rich replaces ":thumbs_up:" in a printed string by 👍: a participant or escrow id must read as stored."""
    f = Findings(epochs=[], hosts=[], rules=[(7, "r", "v", "p", 1)], verdicts=[],
                 samples=[(7, ":pile_of_poo:", 3, "gonka1:thumbs_up:", "invalid", "r", "v", {}, "settled", None,
                           None, None)])
    out = _terminal(f)
    assert "escrow :pile_of_poo:" in out and "gonka1:thumbs_up:" in out and "👍" not in out

"""The charts of the HTML restitution section, on the E366-shaped SPRT case and a downtime flip, through the real
pipeline and database: axes, ticks, axis titles and a legend on every chart, a threshold label clear of its line,
the downtime test drawn when its verdict flips, every value escaped."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from decimal import Decimal

from indexer.reports.restitution import collect, html_section
from indexer.reports.restitution.charts import CHAR, FONT, W, downtime_svg, sprt_svg
from tests.support.restitution_kit import params, summary
from tests.reports.test_restitution_report import _e366
from tests.support.rules_kit import B, GOV, Log, gov_snapshot, load

X = "gonka1hostX"


def _svgs(fragment: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg\b.*?</svg>", fragment, re.S)]


def _texts(svg: ET.Element, cls: str) -> list[str]:
    return ["".join(t.itertext()) for g in svg.iter() if cls in (g.get("class") or "").split()
            for t in g.iter("text")]


def _assert_framed(svg: ET.Element) -> None:
    classes = [c for e in svg.iter() for c in (e.get("class") or "").split()]
    assert {"x-axis", "y-axis"} <= set(classes), classes
    assert classes.count("axis-title") >= 1 and classes.count("x-tick") >= 2
    legend = _texts(svg, "legend-item")
    assert "current" in legend and any(t.startswith("without disputable") for t in legend), legend
    # the legend sits inside the viewBox: no entry runs past the right edge
    for item in (e for e in svg.iter() if e.get("class") == "legend-item"):
        text = item.find("text")
        assert float(text.get("x")) + CHAR * len(text.text) <= W, text.text


def test_sprt_chart_has_axes_legend_and_a_threshold_label_clear_of_its_line(db_url, tmp_path):
    _e366(db_url, tmp_path)
    (case,) = collect(db_url, (366, 366))
    fragment, _ = html_section([case])
    (svg,) = [s for s in _svgs(fragment) if "sprt-chart" in s.get("class")]
    _assert_framed(svg)
    assert _texts(svg, "y-tick") == ["0.00", "2.00", "4.00", "6.00"]  # round steps, LLR 4.46 inside
    assert _texts(svg, "x-tick") == ["0", "1"]  # one settled escrow
    assert "threshold H" in _texts(svg, "legend-item")
    assert all(re.fullmatch(r"-?\d+\.\d\d", t) for t in _texts(svg, "y-tick"))  # Decimal labels, two places
    line = next(e for e in svg.iter("line") if e.get("class") == "threshold")
    label = next(e for e in svg.iter("text") if e.get("class") == "threshold-label")
    assert label.text == "H = 4"
    base, line_y = float(label.get("y")), float(line.get("y1"))
    # the glyphs occupy [baseline - font size, baseline + descent]: the line passes outside that box
    assert line_y >= base + 3 or line_y <= base - FONT, (base, line_y)
    box = next(e for e in svg.iter("rect") if e.get("class") == "threshold-box")
    top, bottom = float(box.get("y")), float(box.get("y")) + float(box.get("height"))
    assert not top <= line_y <= bottom and top <= base - FONT + 1 and bottom >= base  # its box holds it, not the line
    order = [e.get("class") for e in svg.iter() if e.get("class") in ("series", "threshold-label")]
    assert order[-1] == "threshold-label"  # drawn over the trajectories
    assert int(label.get("font-size")) * (375 - 16) / W >= 11  # >= 11 px in a 375 px phone's column
    assert not [s for s in _svgs(fragment) if "downtime-chart" in s.get("class")]  # the downtime test holds


def test_threshold_near_the_top_puts_its_label_below_and_hosts_are_escaped():
    series = {"current": [("1", Decimal("0.5")), ("2", Decimal("1.9"))], "without_disputable": [("1", Decimal(0))]}
    svg = ET.fromstring(sprt_svg(series, Decimal(2), 'gonka1<b>"&'))
    assert svg.get("data-host") == 'gonka1<b>"&'  # parsed back: it was escaped in the attribute
    line_y = float(next(e for e in svg.iter("line") if e.get("class") == "threshold").get("y1"))
    base = float(next(e for e in svg.iter("text") if e.get("class") == "threshold-label").get("y"))
    assert base - FONT >= line_y + 3  # below the line, whole


def downtime_373(db_url, tmp_path) -> None:
    """B misses 7 of 20 at p0 = 0.10 and fails; the 7 are refused timeouts over the governance limit, so without
    them B misses 0 of 20 and passes (test_restitution_db.test_downtime_flip_without_disputable_misses)."""
    log = Log("9301", epoch=373)
    for _ in range(7):
        log.timeout(log.start(5, max_tokens=GOV + 1), "refused")
    recs = [gov_snapshot(epoch=373), params(373),
            summary(373, B, confirmation_weight=5000, inference_count=13, missed_requests=7)]
    recs += [summary(373, f"gonka1other{k}", inference_count=10, missed_requests=0) for k in range(5)]
    load(db_url, tmp_path, recs + log.records, name="downtime-373.ndjson")


def test_downtime_chart_when_the_downtime_verdict_flips(db_url, tmp_path):
    downtime_373(db_url, tmp_path)
    (case,) = collect(db_url, (373, 373))
    fragment, _ = html_section([case])
    (svg,) = [s for s in _svgs(fragment) if "downtime-chart" in s.get("class")]
    assert svg.get("data-host") == B
    _assert_framed(svg)
    assert "p0 = 0.1" in _texts(svg, "legend-item")
    labels = [t.text for t in svg.iter("text") if t.text and "/20 = " in t.text]
    assert labels == ["current: 7/20 = 35.00 %, fails", "without disputable penalties: 0/20 = 0.00 %, passes"]
    assert _texts(svg, "x-tick") == ["0", "10", "20", "30", "40"]  # percent, round steps past 35 %
    assert "Downtime test: miss rate against p0" in fragment


def test_charts_without_a_threshold_and_with_a_hostile_host_name():
    # H unknown (no parameters captured): the trajectories are drawn without a threshold line, label or legend entry
    svg = ET.fromstring(sprt_svg({"current": [("1", Decimal("-0.3"))]}, None, "h"))
    assert not [e for e in svg.iter() if e.get("class") in ("threshold", "threshold-label")]
    assert "threshold H" not in _texts(svg, "legend-item") and _texts(svg, "y-tick")[0] == "-0.50"
    row = {"participant": '<script>"x"&', "missed": 3, "inference_count": 0, "disputable_missed": 3,
           "downtime_p0": Decimal("0.05"), "downtime_passes": False, "downtime_passes_without_disputable": True}
    text = downtime_svg(row)
    assert "<script>" not in text and ET.fromstring(text).get("data-host") == '<script>"x"&'
    assert [t.text for t in ET.fromstring(text).iter("text") if t.text and "/3 = " in t.text] == \
        ["current: 3/3 = 100.00 %, fails", "without disputable penalties: 0/3 = 0.00 %, passes"]

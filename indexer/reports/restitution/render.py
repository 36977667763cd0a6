"""Restitution report rendering shared by every sink (amounts, values), an HTML fragment with SVG charts for the
--html page, and the one-line summary the demo prints (Markdown and CSV: indexer.reports.restitution.markdown). Amounts: ngonka exactly, GONKA with six
decimals truncated (1 GONKA = 10^9 ngonka; never rounds a payment up)."""
from __future__ import annotations

import json
from decimal import ROUND_DOWN, Decimal
from typing import Any

from indexer.reports.restitution.charts import downtime_svg, sprt_svg
from indexer.reports.restitution.collect import EpochCase
from indexer.reports.restitution.verdicts import SETTLED, html_text, level_label, one_line

NGONKA = Decimal(10) ** 9
VARIANTS = ("current", "issue_2078", "tokenize_2093", "narrow_prompt_ge_limit", "hardened_sibling")
NOT_CLAIMED = (
    "Delegation transfers are not applied to the amounts: from chain v0.2.14 on a host that delegates keeps its "
    "reward weight less delegation_share per model delegated, and a delegatee gains it; the indexer does not "
    "capture the epoch's transfers (\"Delegation\" gives the amount if the host delegated one model).",
    "The power cap is applied as the chain version in force applies it to the ACTIVE hosts' effective weights "
    "(fn.power_cap), over the epoch without the disputable penalties: every host they excluded is back in the list "
    "together, and a host the chain excluded is priced with itself back in it. What that would have changed in "
    "other hosts' payouts (a moved cap; a downtime test failed on the lower dynamic p0) is shown per host "
    "(reward_shift_without_disputable), neither paid nor recovered.",
    "confirmation_weight is the last value the chain stored; confirmation rounds after an exclusion may not have "
    "updated it. Before chain v0.2.12 the reward weight rule is not reproduced (the amount is then unknown).",
    "Work coins, the collateral slash and the reputation reset that came with an exclusion are not included.",
    "The SPRT is replayed one update per settled escrow, in settlement order when settlement heights are recorded "
    "and in escrow-id (creation) order otherwise; the chain counts assigned nonces "
    "(devshardAssignedUpperBoundForSlot), the indexer its replayed inferences.",
    "That the disputable penalties were wrong: they are the penalties the rules stage could not uphold "
    "(api.disputable_penalties); the committee judges them on the evidence listed.",
)


def gonka(ngonka: Decimal | int | None) -> str:
    if ngonka is None:
        return "unknown"
    return f"{(Decimal(ngonka) / NGONKA).quantize(Decimal('0.000001'), rounding=ROUND_DOWN):,}"


def role(row: dict[str, Any]) -> str:
    test = row["flipped_test"] or ""
    if "sprt" in test:
        return "direct: invalidation SPRT exclusion (statistical_invalidations)"
    if test == "downtime":
        return "direct: downtime test (reward weight set to 0)"
    return "not a candidate"


def fmt(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Decimal):
        return f"{value:.4f}" if value != value.to_integral_value() else f"{value:,}"
    return str(value)


def restitution_summary(cases: list[EpochCase]) -> str:
    """The closing summary of `demo` and `report --restitution`: a heading, then per host its epoch, the test that
    flips, the amount to restitute and the evidence level behind it, each on its own short line (a terminal or a log
    shows it unwrapped), and how many host-epochs could not be evaluated."""
    found = [(c.epoch, r) for c in cases for r in c.candidates]
    unknown = sum(len(c.unknown) for c in cases)
    tail = [f"  {unknown} host-epoch(s) could not be evaluated (see the reports' \"Hosts that could not be "
            "evaluated\")"] if unknown else []
    if not found:
        return "\n".join(["restitution: no host's epoch outcome is shown to flip without the disputable penalties",
                          *tail])
    lines = [f"restitution: {len(found)} host epoch outcome(s) flip without the disputable penalties"]
    for epoch, r in found:
        if "sprt" in (r["flipped_test"] or ""):
            why = (f"SPRT max LLR {r['sprt_max_llr']:.2f} → {r['sprt_max_llr_without_disputable']:.2f} "
                   f"(H {fmt(r['sprt_threshold'])}) without {r['disputable_invalid']} disputable invalidation(s)")
        else:
            why = f"downtime test fails → passes without {r['disputable_missed']} disputable miss(es)"
        # the participant is a peer's choice: one line, bounded, no terminal control characters
        lines += [f"  epoch {epoch} {one_line(r['participant'], 200)}", f"    {why}",
                  f"    to restitute: {gonka(r['restitution_amount'])} GONKA ({fmt(r['restitution_amount'])} ngonka)",
                  f"    evidence level: {level_label(r['evidence_level'])}"]
    return "\n".join(lines + tail)


def level_cell(level: str | None) -> str:
    """An evidence level as a table cell of the HTML page: marked (class "below") when not settled."""
    mark = "" if level == SETTLED else ' class="below"'
    return f'<td{mark} data-level="{html_text(level or "")}">{html_text(level_label(level))}</td>'


def _downtime_flips(r: dict[str, Any]) -> bool:
    """The downtime verdict changes without the disputable misses and the chart has what it needs."""
    return (r["downtime_passes"] is False and r["downtime_passes_without_disputable"] is True
            and r["downtime_p0"] is not None and r["missed"] is not None and r["inference_count"] is not None)


def html_section(cases: list[EpochCase]) -> tuple[str, dict[str, Any]]:
    """An HTML fragment (tables, then per affected host its charts: the SPRT LLR after each settlement when the
    SPRT was replayed, and the downtime test when its verdict flips; with the disputable penalties in orange and
    without them in blue) and the chart data, for the --html page. Epochs ascend (collect orders them)."""
    data: dict[str, Any] = {}
    parts = ['<section id="restitution"><h2>Restitution</h2>']
    for case in cases:
        if not case.candidates:
            continue
        # tables scroll in their own box (class "scroll" of the page), so a phone's page never scrolls sideways
        parts.append(f"<h3>Epoch {case.epoch}</h3><div class=\"scroll\"><table><tr><th>participant</th><th>role</th>"
                     "<th>to restitute (GONKA)</th><th>to restitute (ngonka)</th><th>evidence level</th></tr>")
        for r in case.candidates:
            parts.append(f"<tr><td>{html_text(r['participant'])}</td><td>{html_text(role(r))}</td>"
                         f"<td>{gonka(r['restitution_amount'])}</td><td>{fmt(r['restitution_amount'])}</td>"
                         f"{level_cell(r['evidence_level'])}</tr>")
        parts.append("</table></div>")
        for r in case.candidates:
            series = case.trajectories.get(r["participant"], {})
            data.setdefault(str(case.epoch), {})[r["participant"]] = {
                "threshold": str(r["sprt_threshold"]),
                **{k: [[e, str(v)] for e, v in s] for k, s in series.items()}}
            if series:
                parts.append(f"<figure><figcaption>Invalidation SPRT: LLR after each settlement, "
                             f"{html_text(r['participant'])}</figcaption>"
                             f"{sprt_svg(series, r['sprt_threshold'], r['participant'])}</figure>")
            if _downtime_flips(r):
                parts.append(f"<figure><figcaption>Downtime test: miss rate against p0, "
                             f"{html_text(r['participant'])}</figcaption>{downtime_svg(r)}</figure>")
    if len(parts) == 1:
        parts.append("<p>No host's epoch outcome flips without the disputable penalties.</p>")
    parts.append("</section>")
    return "".join(parts), data


def html_block(cases: list[EpochCase]) -> str:
    """:func:`html_section` with its chart data embedded as JSON (``<script id="restitution-data">``), ready to place
    in a page."""
    fragment, data = html_section(cases)
    # no "<" at all inside the script element: "</script>" would end it, and "<!--<script>" would make the
    # parser read past the real "</script>" (HTML's script data escape states); JSON reads \u003c as "<"
    payload = json.dumps(data).replace("<", "\\u003c")
    return fragment + f'<script type="application/json" id="restitution-data">{payload}</script>'

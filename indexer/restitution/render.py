"""Restitution report rendering: Markdown and CSV per epoch (restitution-<epoch>.md / .csv), an HTML fragment with
SVG charts for the --html page, and the one-line summary the demo prints. Amounts: ngonka exactly, GONKA with six
decimals truncated (1 GONKA = 10^9 ngonka; never rounds a payment up)."""
from __future__ import annotations

import csv
import html
import io
import json
from decimal import ROUND_DOWN, Decimal
from pathlib import Path
from typing import Any

from indexer.restitution.collect import EpochCase

NGONKA = Decimal(10) ** 9
VARIANTS = ("current", "issue_2078", "tokenize_2093", "narrow_prompt_ge_limit", "hardened_sibling")
CSV_COLUMNS = ("epoch_index", "participant", "role", "flipped_test", "amount_gonka", "amount_ngonka", "missed",
               "invalid", "disputable_missed", "disputable_invalid", "downtime_passes",
               "downtime_passes_without_disputable", "sprt_max_llr", "sprt_max_llr_without_disputable",
               "sprt_threshold", "excluded_reason", "confirmation_weight", "total_weight",
               "theoretical_epoch_reward", "chain_version", "params_exact")
NOT_CLAIMED = (
    "Delegation transfers (poc_delegation) are not applied: a host that delegates keeps only its share after the "
    "transfer, and the delegatee's loss is not in this table. The indexer does not capture delegations.",
    "The power cap (30 % of active weight) is not applied: excluding a host can push other hosts through the cap; "
    "those indirect losses are not computed.",
    "confirmation_weight is the last value the chain stored; confirmation rounds after an exclusion may not have "
    "updated it, so the amount is an upper bound on a full healthy epoch's share.",
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


def _fmt(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Decimal):
        return f"{value:.4f}" if value != value.to_integral_value() else f"{value:,}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(_fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows]
    return out


def markdown(case: EpochCase) -> str:
    lines = [f"# Restitution report: epoch {case.epoch}", ""]
    first = case.rows[0] if case.rows else {}
    cands = case.candidates
    lines += ["## Summary", ""]
    if not cands:
        lines += ["No host's epoch outcome changes when the disputable penalties are removed.", ""]
    else:
        total = sum((r["reward_at_stake"] or 0) for r in cands)
        lines += _table(["participant", "role", "amount (GONKA)", "amount (ngonka)"],
                        [[f"`{r['participant']}`", role(r), f"**{gonka(r['reward_at_stake'])}**",
                          _fmt(r["reward_at_stake"])] for r in cands]
                        + [["**Total**", "", f"**{gonka(total)}**", _fmt(total)]])
        lines += ["", "Amount = ⌊theoretical epoch reward × confirmation_weight / total_weight⌋ "
                  f"(theoretical epoch reward {_fmt(first.get('theoretical_epoch_reward'))} ngonka).", ""]
    lines += ["## The incident in the data", ""]
    for r in cands:
        ev = r["evidence"]
        lines += [f"### `{r['participant']}`", "",
                  f"- observed counts ({r['counts_source']}): {r['inference_count']} inferences, {r['missed']} "
                  f"missed, {r['invalid']} invalidated, {r['validated']} validated; disputable: "
                  f"{r['disputable_missed']} missed, {r['disputable_invalid']} invalidated",
                  f"- invalidation SPRT: max LLR {_fmt(r['sprt_max_llr'])} with, "
                  f"{_fmt(r['sprt_max_llr_without_disputable'])} without the disputable penalties, against H = "
                  f"{_fmt(r['sprt_threshold'])}; crossed {_fmt(r['sprt_crossed'])} → "
                  f"{_fmt(r['sprt_crossed_without_disputable'])}"
                  + (f" (at the settlement of escrow {ev['sprt_crossed_at_escrow']})"
                     if ev.get("sprt_crossed_at_escrow") else ""),
                  f"- downtime test: passes {_fmt(r['downtime_passes'])} → "
                  f"{_fmt(r['downtime_passes_without_disputable'])} (p0 {_fmt(r['downtime_p0'])}; "
                  f"{json.dumps(ev.get('downtime', {}), default=str)})",
                  f"- observed exclusion: {r['excluded_reason'] or 'none'}", "", "Penalties disputed:", ""]
        pens = [p for p in case.penalties if p["participant"] == r["participant"]]
        lines += _table(["escrow", "inference", "penalty", "rule", "verdict", "evidence"],
                        [[p["escrow_id"], str(p["inference_id"]), p["penalty"], p["rule"], p["verdict"] or "",
                          "`" + json.dumps(p["evidence"], sort_keys=True, default=str)[:300] + "`"] for p in pens])
        lines.append("")
    lines += ["## Parameters in force", ""]
    if first:
        ev = first["evidence"]
        lines += _table(["parameter", "value"], [
            ["false_positive_rate (SPRT p0)", first["sprt_p0"]],
            ["bad_participant_invalidation_rate (SPRT p1)", first["sprt_p1"]],
            ["invalidation_h_threshold (H)", first["sprt_threshold"]],
            ["binom_test_p0 (downtime)", first["binom_test_p0"]],
            ["snapshot exact (read as of the epoch)", first["params_exact"]],
            ["read at height", first["params_height"]],
            ["chain version", f"{first['chain_version'] or 'newest (assumed)'} ({first['chain_version_source']})"],
        ])
        notes = [ev["params"].get("inexact"), ev["params"].get("changed_by_next_epoch")]
        lines += [""] + [f"> {n}" for n in notes if n] + [""]
    lines += ["## What this report does not claim", ""] + [f"- {t}" for t in NOT_CLAIMED] + [""]
    lines += ["## Rule variants", "", "Penalties each variant would assign and the resulting outcomes "
              "(docs/restitution.md in the indexer gives each variant as a formula).", ""]
    lines += _table(["participant", "variant", "missed", "invalid", "downtime passes", "SPRT crossed"],
                    [[f"`{v['participant']}`", v["variant"], v["missed"], v["invalid"], v["downtime_passes"],
                      v["sprt_crossed"]] for v in case.variants])
    return "\n".join(lines) + "\n"


def rows_csv(case: EpochCase) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in case.candidates:
        w.writerow([r["epoch_index"], r["participant"], role(r), r["flipped_test"],
                    gonka(r["reward_at_stake"]).replace(",", ""), r["reward_at_stake"]]
                   + ["" if r[c] is None else r[c] for c in CSV_COLUMNS[6:]])
    return buf.getvalue()


def write_reports(cases: list[EpochCase], out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for case in cases:
        for suffix, text in (("md", markdown(case)), ("csv", rows_csv(case))):
            path = out / f"restitution-{case.epoch}.{suffix}"
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def restitution_summary(cases: list[EpochCase]) -> str:
    """The closing summary of `demo` and `report --restitution`: a heading, then per host its epoch, the test that
    flips and the amount at stake, each on its own short line (a terminal or a log shows it unwrapped)."""
    found = [(c.epoch, r) for c in cases for r in c.candidates]
    if not found:
        return "restitution: no host's epoch outcome flips without the disputable penalties"
    lines = [f"restitution: {len(found)} host epoch outcome(s) flip without the disputable penalties"]
    for epoch, r in found:
        if "sprt" in (r["flipped_test"] or ""):
            why = (f"SPRT max LLR {r['sprt_max_llr']:.2f} → {r['sprt_max_llr_without_disputable']:.2f} "
                   f"(H {_fmt(r['sprt_threshold'])}) without {r['disputable_invalid']} disputable invalidation(s)")
        else:
            why = f"downtime test fails → passes without {r['disputable_missed']} disputable miss(es)"
        lines += [f"  epoch {epoch} {r['participant']}", f"    {why}",
                  f"    at stake: {gonka(r['reward_at_stake'])} GONKA ({_fmt(r['reward_at_stake'])} ngonka)"]
    return "\n".join(lines)


def _svg(series: dict[str, list[tuple[str, Decimal]]], threshold: Decimal | None) -> str:
    points = [float(v) for s in series.values() for _, v in s] + [0.0] + ([float(threshold)] if threshold else [])
    lo, hi = min(points), max(points)
    n = max((len(s) for s in series.values()), default=1)
    w, h = 420, 160
    x = lambda i: 30 + (w - 40) * (i / max(n, 1))  # noqa: E731
    y = lambda v: 10 + (h - 20) * (1 - (v - lo) / ((hi - lo) or 1))  # noqa: E731
    # scales to the column's width (a phone's too), keeping its proportions
    out = [f'<svg viewBox="0 0 {w} {h}" style="width:100%;max-width:{w}px;height:auto" role="img">']
    if threshold is not None:
        out.append(f'<line x1="30" x2="{w - 10}" y1="{y(float(threshold)):.1f}" y2="{y(float(threshold)):.1f}" '
                   f'stroke="#c00" stroke-dasharray="4"/><text x="32" y="{y(float(threshold)) - 3:.1f}" '
                   f'font-size="10">H = {threshold}</text>')
    for name, color in (("current", "#c60"), ("without_disputable", "#06c")):
        pts = [(0, 0.0)] + [(i + 1, float(v)) for i, (_, v) in enumerate(series.get(name, []))]
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="'
                   + " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in pts) + f'"><title>{name}</title></polyline>')
    out.append("</svg>")
    return "".join(out)


def html_section(cases: list[EpochCase]) -> tuple[str, dict[str, Any]]:
    """An HTML fragment (tables + one inline SVG per affected host: the SPRT LLR after each settlement, with the
    disputable penalties in orange and without them in blue) and the chart data, for the --html page."""
    data: dict[str, Any] = {}
    parts = ['<section id="restitution"><h2>Restitution</h2>']
    for case in cases:
        if not case.candidates:
            continue
        # tables scroll in their own box (class "scroll" of the page), so a phone's page never scrolls sideways
        parts.append(f"<h3>Epoch {case.epoch}</h3><div class=\"scroll\"><table><tr><th>participant</th><th>role</th>"
                     "<th>amount (GONKA)</th><th>amount (ngonka)</th></tr>")
        for r in case.candidates:
            parts.append(f"<tr><td>{html.escape(r['participant'])}</td><td>{html.escape(role(r))}</td>"
                         f"<td>{gonka(r['reward_at_stake'])}</td><td>{_fmt(r['reward_at_stake'])}</td></tr>")
        parts.append("</table></div>")
        for r in case.candidates:
            series = case.trajectories.get(r["participant"], {})
            data.setdefault(str(case.epoch), {})[r["participant"]] = {
                "threshold": str(r["sprt_threshold"]),
                **{k: [[e, str(v)] for e, v in s] for k, s in series.items()}}
            parts.append(f"<figure><figcaption>SPRT LLR after each settlement, "
                         f"{html.escape(r['participant'])}</figcaption>{_svg(series, r['sprt_threshold'])}</figure>")
    if len(parts) == 1:
        parts.append("<p>No host's epoch outcome flips without the disputable penalties.</p>")
    parts.append("</section>")
    return "".join(parts), data


def html_block(cases: list[EpochCase]) -> str:
    """:func:`html_section` with its chart data embedded as JSON (``<script id="restitution-data">``), ready to place
    in a page."""
    fragment, data = html_section(cases)
    payload = json.dumps(data).replace("</", "<\\/")  # no "</script>" inside the data
    return fragment + f'<script type="application/json" id="restitution-data">{payload}</script>'

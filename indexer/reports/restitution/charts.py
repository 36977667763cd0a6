"""The SVG charts of the HTML restitution section: the invalidation SPRT trajectory of a host (LLR after each
settled escrow, with and without the disputable penalties, against the threshold H) and the downtime test of a host
(its miss rate with and without the disputable misses, against the p0 the test used). Each chart carries its axes,
ticks, axis titles and a visible legend; tick and value labels are formatted from Decimal, never from floats (the
floats only place shapes). The SVGs scale with their viewBox, so every font size here is chosen to stay >= 11 px at
a 375 px wide phone column."""
from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

from indexer.reports.restitution.verdicts import html_text

W, H = 480, 260            # viewBox of every chart
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 58, 48
FONT = 15                  # viewBox units: 15 * 359 / 480 > 11 px in a 375 px phone's column
CHAR = FONT * 0.55         # a generous average glyph width, to lay out the legend
COLOURS = {"current": "#c60", "without_disputable": "#06c", "threshold": "#c00"}
LABELS = {"current": "current", "without_disputable": "without disputable penalties"}


def _e(v: Any) -> str:
    return html_text(v)


def _dec(v: Decimal, places: int = 2) -> str:
    return f"{Decimal(v).quantize(Decimal(1).scaleb(-places)):f}"


def _ticks(lo: Decimal, hi: Decimal, n: int = 4) -> list[Decimal]:
    """About n round steps (1, 2, 2.5 or 5 times a power of ten) covering [lo, hi], exactly in Decimal."""
    raw = (hi - lo) / n
    magnitude = Decimal(1).scaleb(raw.adjusted())
    step = next(m * magnitude for m in (Decimal(1), Decimal(2), Decimal("2.5"), Decimal(5), Decimal(10))
                if m * magnitude >= raw)
    first = (lo / step).to_integral_value(rounding=ROUND_FLOOR) * step
    last = (hi / step).to_integral_value(rounding=ROUND_CEILING) * step
    return [first + step * i for i in range(int((last - first) / step) + 1)]


def _legend(items: list[tuple[str, str, bool]]) -> str:
    """Legend entries (colour, label, dashed) across the chart's top edge, wrapping to a second row."""
    out, x, row = ['<g class="legend">'], LEFT, 14
    for colour, label, dashed in items:
        width = 30 + len(label) * CHAR
        if x > LEFT and x + width > W - RIGHT:
            x, row = LEFT, row + FONT + 5
        dash = ' stroke-dasharray="4"' if dashed else ""
        out.append(f'<g class="legend-item"><line x1="{x}" x2="{x + 18}" y1="{row}" y2="{row}" stroke="{colour}" '
                   f'stroke-width="3"{dash}/><text x="{x + 22}" y="{row + 4}" font-size="{FONT}">{_e(label)}</text>'
                   '</g>')
        x += width
    out.append("</g>")
    return "".join(out)


def _frame(x_title: str, y_title: str) -> str:
    return (f'<line class="axis x-axis" x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" '
            f'stroke="#333"/><line class="axis y-axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{H - BOTTOM}" '
            f'stroke="#333"/><text class="axis-title" x="{(LEFT + W - RIGHT) / 2}" y="{H - 6}" font-size="{FONT}" '
            f'text-anchor="middle">{_e(x_title)}</text><text class="axis-title" x="14" y="{(TOP + H - BOTTOM) / 2}" '
            f'font-size="{FONT}" text-anchor="middle" transform="rotate(-90 14 {(TOP + H - BOTTOM) / 2})">'
            f'{_e(y_title)}</text>')


def _threshold_label(text: str, line_y: float, width: float) -> str:
    """The label sits above its line (below when the line is near the top), on a white box at the left end, where
    every trajectory is still near 0 (step 0), and is drawn over the series, so no line strikes it through."""
    above = line_y - TOP > FONT + 8
    base = line_y - 5 if above else line_y + FONT + 4
    x = LEFT + 6
    return (f'<rect class="threshold-box" x="{x - 2}" y="{base - FONT:.1f}" width="{width:.1f}" '
            f'height="{FONT + 3}" fill="#fff" fill-opacity="0.9"/><text class="threshold-label" x="{x}" '
            f'y="{base:.1f}" font-size="{FONT}" fill="{COLOURS["threshold"]}">{_e(text)}</text>')


def sprt_svg(series: dict[str, list[tuple[str, Decimal]]], threshold: Decimal | None, host: str) -> str:
    """The LLR after each settled escrow (step 0 = before the first), both variants, and H when known."""
    values = [Decimal(v) for s in series.values() for _, v in s] + [Decimal(0)]
    values += [Decimal(threshold)] if threshold is not None else []
    ticks = _ticks(min(values), max(max(values), min(values) + 1))
    lo, hi = ticks[0], ticks[-1]
    steps = max((len(s) for s in series.values()), default=0)
    span = max(steps, 1)
    x = lambda i: LEFT + (W - LEFT - RIGHT) * i / span  # noqa: E731
    y = lambda v: TOP + (H - TOP - BOTTOM) * float((hi - Decimal(v)) / (hi - lo))  # noqa: E731
    out = [f'<svg class="chart sprt-chart" data-host="{_e(host)}" viewBox="0 0 {W} {H}" '
           f'style="width:100%;max-width:{W}px;height:auto" role="img" '
           f'aria-label="SPRT log-likelihood ratio of {_e(host)} after each settled escrow">',
           _frame("settled escrows (step)", "LLR")]
    for t in ticks:
        out.append(f'<g class="tick y-tick"><line x1="{LEFT - 4}" x2="{LEFT}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
                   f'stroke="#333"/><text x="{LEFT - 6}" y="{y(t) + 4:.1f}" font-size="{FONT}" text-anchor="end">'
                   f'{_dec(t)}</text></g>')
    stride = max(1, -(-span // 8))
    for i in range(0, steps + 1, stride):
        out.append(f'<g class="tick x-tick"><line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{H - BOTTOM}" '
                   f'y2="{H - BOTTOM + 4}" stroke="#333"/><text x="{x(i):.1f}" y="{H - BOTTOM + 17}" '
                   f'font-size="{FONT}" text-anchor="middle">{i}</text></g>')
    legend = [(COLOURS[k], LABELS[k], False) for k in LABELS]
    if threshold is not None:
        ty = y(threshold)
        label = f"H = {fmt_exact(threshold)}"
        out.append(f'<line class="threshold" x1="{LEFT}" x2="{W - RIGHT}" y1="{ty:.1f}" y2="{ty:.1f}" '
                   f'stroke="{COLOURS["threshold"]}" stroke-dasharray="4"/>')
        legend.append((COLOURS["threshold"], "threshold H", True))
    for name in LABELS:
        pts = [(0, Decimal(0))] + [(i + 1, v) for i, (_, v) in enumerate(series.get(name, []))]
        out.append(f'<polyline class="series" data-series="{name}" fill="none" stroke="{COLOURS[name]}" '
                   f'stroke-width="2" points="' + " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in pts)
                   + f'"><title>{_e(LABELS[name])}</title></polyline>')
    if threshold is not None:
        out.append(_threshold_label(label, ty, len(label) * CHAR + 4))
    out += [_legend(legend), "</svg>"]
    return "".join(out)


def fmt_exact(v: Decimal | int) -> str:
    """A chain parameter as stored, without exponent notation (4, 0.1, 2.1972)."""
    d = Decimal(v)
    return f"{d.normalize():f}" if d != d.to_integral_value() else f"{d.to_integral_value():f}"


def downtime_svg(row: dict[str, Any]) -> str:
    """Miss rate of the host (missed / (inferences + missed)), as the chain's test sees it and without the
    disputable misses (each becomes a completed inference, so the total is unchanged), against p0."""
    missed, total = int(row["missed"]), int(row["missed"]) + int(row["inference_count"])
    without = missed - int(row["disputable_missed"] or 0)
    p0 = Decimal(row["downtime_p0"])
    rates = {"current": Decimal(missed) / total if total else Decimal(0),
             "without_disputable": Decimal(without) / total if total else Decimal(0)}
    passes = {"current": row["downtime_passes"], "without_disputable": row["downtime_passes_without_disputable"]}
    ticks = _ticks(Decimal(0), max([p0, *rates.values()]) * Decimal("1.1") or Decimal(1))
    hi = ticks[-1]
    x = lambda v: LEFT + (W - LEFT - RIGHT) * float(Decimal(v) / hi)  # noqa: E731
    host = row["participant"]
    out = [f'<svg class="chart downtime-chart" data-host="{_e(host)}" viewBox="0 0 {W} {H}" '
           f'style="width:100%;max-width:{W}px;height:auto" role="img" '
           f'aria-label="downtime test of {_e(host)}: miss rate against p0">',
           _frame("miss rate (missed / (inferences + missed)), %", "")]
    for t in ticks:
        out.append(f'<g class="tick x-tick"><line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{H - BOTTOM}" '
                   f'y2="{H - BOTTOM + 4}" stroke="#333"/><text x="{x(t):.1f}" y="{H - BOTTOM + 17}" '
                   f'font-size="{FONT}" text-anchor="middle">{fmt_exact(t * 100)}</text></g>')
    band = (H - TOP - BOTTOM) / 2
    for k, name in enumerate(LABELS):
        top = TOP + band * k + 12
        verdict = {True: "passes", False: "fails", None: "unknown"}[passes[name]]
        count = missed if name == "current" else without
        out.append(f'<g class="tick y-tick"><line x1="{LEFT - 4}" x2="{LEFT}" y1="{top + 14}" y2="{top + 14}" '
                   f'stroke="#333"/></g><rect class="bar" data-series="{name}" x="{LEFT}" y="{top}" '
                   f'width="{max(x(rates[name]) - LEFT, 1):.1f}" height="28" fill="{COLOURS[name]}"><title>'
                   f'{_e(LABELS[name])}: {count} of {total} missed</title></rect><text x="{LEFT + 4}" '
                   f'paint-order="stroke" stroke="#fff" stroke-width="4" '
                   f'y="{top + 46}" font-size="{FONT}">{_e(LABELS[name])}: {count}/{total} = '
                   f'{_dec(rates[name] * 100)} %, {verdict}</text>')
    px = x(p0)
    out.append(f'<line class="threshold" x1="{px:.1f}" x2="{px:.1f}" y1="{TOP}" y2="{H - BOTTOM}" '
               f'stroke="{COLOURS["threshold"]}" stroke-dasharray="4"/>')
    out += [_legend([(COLOURS["current"], "current", False),
                     (COLOURS["without_disputable"], "without disputable misses", False),
                     (COLOURS["threshold"], f"p0 = {fmt_exact(p0)}", True)]), "</svg>"]
    return "".join(out)

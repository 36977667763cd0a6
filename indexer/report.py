"""`indexer report`: findings per epoch and per host, in the terminal or as a self-contained HTML page.

Reads only the `api` views, like any dashboard would.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

import psycopg
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

_WHERE = "WHERE (%(lo)s::bigint IS NULL OR epoch_index BETWEEN %(lo)s AND %(hi)s)"


@dataclass
class Findings:
    epochs: list[tuple]
    hosts: list[tuple]
    rules: list[tuple]
    verdicts: list[tuple]
    samples: list[tuple]


def collect(url: str, epochs: tuple[int, int] | None = None) -> Findings:
    params = {"lo": epochs[0] if epochs else None, "hi": epochs[1] if epochs else None}
    with psycopg.connect(url) as conn:
        q = lambda sql: conn.execute(sql, params).fetchall()  # noqa: E731
        return Findings(
            epochs=q(f"""SELECT epoch_index, sum(missed), sum(invalid), sum(disputable_missed), sum(disputable_invalid)
                        FROM api.host_epoch_penalties {_WHERE} GROUP BY 1 ORDER BY 1"""),
            hosts=q(f"""SELECT epoch_index, participant, missed, invalid, disputable_missed, disputable_invalid,
                               reported_missed, reported_invalid
                        FROM api.host_epoch_penalties {_WHERE}
                        ORDER BY epoch_index, disputable_missed + disputable_invalid DESC, participant"""),
            rules=q(f"""SELECT epoch_index, rule, verdict, penalty, count(*) FROM api.disputable_penalties {_WHERE}
                        GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3"""),
            verdicts=q(f"""SELECT model_id, verdict, count(*) FROM api.context_refusals {_WHERE}
                           GROUP BY 1, 2 ORDER BY 1, 2"""),
            samples=q(f"""SELECT DISTINCT ON (rule) epoch_index, escrow_id, inference_id, participant, penalty, rule,
                                 verdict, evidence::text
                          FROM api.disputable_penalties {_WHERE} ORDER BY rule, epoch_index, escrow_id, inference_id"""),
        )


def _cell(value) -> Text:
    """A table cell shown as the data is: model ids, participants and evidence may contain Rich markup ([/])."""
    return Text("—" if value is None else str(value))


def print_report(f: Findings, console: Console) -> None:
    t = Table(title="Penalties per epoch: recorded (replay) vs disputable (rules)")
    for col in ("epoch", "missed", "invalid", "disputable missed", "disputable invalid"):
        t.add_column(col, justify="right")
    for row in f.epochs:
        t.add_row(*map(_cell, row))
    console.print(t)
    h = Table(title="Per host")
    for col in ("epoch", "participant", "missed", "invalid", "disp. missed", "disp. invalid", "chain missed",
                "chain invalid"):
        h.add_column(col, justify="right") if col != "participant" else h.add_column(col, no_wrap=True, min_width=16)
    for row in f.hosts:
        h.add_row(*map(_cell, row))
    console.print(h)
    r = Table(title="Disputable penalties by rule family")
    for col in ("epoch", "rule", "verdict", "penalty", "count"):
        r.add_column(col)
    for row in f.rules:
        r.add_row(*map(_cell, row))
    console.print(r)
    if f.samples:
        console.print("[bold]One example per rule family[/] (full evidence in api.disputable_penalties):")
        for epoch, escrow, inference, host, penalty, rule, verdict, evidence in f.samples:
            console.print(f"  [cyan]{escape(str(rule))}[/] epoch {epoch} escrow {escape(str(escrow))} inference "
                          f"{inference}: {escape(str(host))} {escape(str(penalty))}, verdict {escape(str(verdict))}\n"
                          f"    evidence {escape(str(evidence)[:300])}", soft_wrap=True, highlight=False)
    if not f.rules:
        console.print("[green]no disputable penalties in range[/]")


# -- HTML -------------------------------------------------------------------------------------------
def _bars(title: str, groups: list[tuple[str, list[tuple[str, int, str]]]]) -> str:
    """Grouped horizontal bar chart as inline SVG: groups of (label, value, colour)."""
    longest = max((v for _, bars in groups for _, v, _ in bars), default=1) or 1
    rows, y = [], 30
    for label, bars in groups:
        rows.append(f'<text x="0" y="{y + 12}" class="g">{html.escape(label)}</text>')
        for name, value, colour in bars:
            width = 420 * value / longest
            rows.append(f'<rect x="260" y="{y}" width="{width:.1f}" height="14" fill="{colour}"><title>'
                        f'{html.escape(name)}: {value}</title></rect>'
                        f'<text x="{266 + width:.1f}" y="{y + 11}" class="v">{value} {html.escape(name)}</text>')
            y += 17
        y += 8
    return (f'<figure><figcaption>{html.escape(title)}</figcaption><svg width="820" height="{y + 10}" '
            f'role="img">{"".join(rows)}</svg></figure>')


_COLOURS = {"missed": "#8da0cb", "invalid": "#e78ac3", "disputable missed": "#fc8d62", "disputable invalid": "#d53e4f",
            "over_limit": "#d53e4f", "fits": "#66c2a5", "undetermined": "#bbbbbb"}


def render_html(f: Findings) -> str:
    host_groups = [(f"{epoch} · {host}", [(k, v or 0, _COLOURS[k]) for k, v in
                                          (("missed", m), ("disputable missed", dm), ("invalid", i),
                                           ("disputable invalid", di))])
                   for epoch, host, m, i, dm, di, _, _ in f.hosts]
    by_model: dict[str, list] = {}
    for model, verdict, n in f.verdicts:
        by_model.setdefault(model, []).append((verdict, n, _COLOURS.get(verdict, "#999")))
    table = "".join(f"<tr>{''.join(f'<td>{html.escape(str(v))}</td>' for v in row)}</tr>" for row in f.rules)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>devshard-indexer findings</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;color:#222}}figure{{margin:1.5em 0}}
figcaption{{font-weight:600;margin-bottom:.5em}}.g{{font-size:12px}}.v{{font-size:11px;fill:#444}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px}}</style></head><body>
<h1>Penalties recorded vs disputable</h1>
<p>Recorded = the replay's missed/invalid counters; disputable = penalties the governance-limit rules would not
uphold (upstream #2078, #2093, #1903).</p>
{_bars("Penalties per host and epoch", host_groups)}
{_bars("Context-length verdict mix per model", sorted(by_model.items()))}
<h2>Disputable penalties by rule family</h2>
<table><tr><th>epoch</th><th>rule</th><th>verdict</th><th>penalty</th><th>count</th></tr>{table}</table>
</body></html>"""

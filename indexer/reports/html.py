"""`indexer report --html`: one self-contained page (inline CSS, SVG and a little JS; nothing fetched) that leads
with what matters per epoch (with the part of the amount to restitute that rests on escrow logs verified to
settled), then where penalties concentrate (host × epoch), then every disputable penalty with its escrow's evidence
level and its evidence (filterable by host and rule, or by host and epoch from a heatmap cell), then the governance
limits in force. Epochs ascend in every section. Reads only the `api` views."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from decimal import Decimal

import psycopg

from indexer.reports.restitution.render import gonka, level_cell
from indexer.reports.restitution.verdicts import REASON_LIMIT, evidence_note, html_text, one_line

_WHERE = "WHERE (%(lo)s::bigint IS NULL OR epoch_index BETWEEN %(lo)s AND %(hi)s)"
MAX_ROWS = 5000  # evidence rows on the page; the rest are counted and left to api.disputable_penalties
RULE_COLOURS = ["#d53e4f", "#f46d43", "#3288bd", "#66a61e", "#984ea3", "#e6ab02", "#666666"]


@dataclass
class Page:
    epochs: list[int] = field(default_factory=list)
    hosts_by_epoch: dict[int, tuple[int, int]] = field(default_factory=dict)   # epoch -> (affected, all)
    rules_by_epoch: dict[int, dict[str, int]] = field(default_factory=dict)
    # epoch -> (to restitute, of which on escrow logs verified to settled); None: view not there yet
    stake_by_epoch: dict[int, tuple[Decimal | None, Decimal | None]] | None = None
    matrix: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # (host, epoch) -> (missed, invalid)
    penalties: list[tuple] = field(default_factory=list)
    total_penalties: int = 0
    limits: list[tuple] = field(default_factory=list)
    levels: list[tuple] = field(default_factory=list)    # (evidence level, escrows), weakest first
    failures: list[tuple] = field(default_factory=list)  # (epoch, escrow, check, nonce, reason), at most MAX_ROWS


def collect_page(url: str, epochs: tuple[int, int] | None = None) -> Page:
    params = {"lo": epochs[0] if epochs else None, "hi": epochs[1] if epochs else None}
    p = Page()
    with psycopg.connect(url) as conn:
        q = lambda sql: conn.execute(sql, params).fetchall()  # noqa: E731
        for epoch, host, dm, di in q(f"""SELECT epoch_index, participant, disputable_missed, disputable_invalid
                                         FROM api.host_epoch_penalties {_WHERE}"""):
            p.matrix[(host, epoch)] = (dm, di)
            affected, total = p.hosts_by_epoch.get(epoch, (0, 0))
            p.hosts_by_epoch[epoch] = (affected + (dm + di > 0), total + 1)
        for epoch, rule, n in q(f"SELECT epoch_index, rule, count(*) FROM api.disputable_penalties {_WHERE} "
                                "GROUP BY 1, 2"):
            p.rules_by_epoch.setdefault(epoch, {})[rule] = n
        p.epochs = sorted(set(p.hosts_by_epoch) | set(p.rules_by_epoch))
        if conn.execute("SELECT to_regclass('api.restitution_impact')").fetchone()[0] is not None:
            # settled with a note (something the check could not make) does not count as verified to settled
            p.stake_by_epoch = {e: (total, settled) for e, total, settled in q(f"""
                SELECT epoch_index, sum(restitution_amount) FILTER (WHERE restitution_candidate),
                       sum(restitution_amount) FILTER (WHERE restitution_candidate AND evidence_level = 'settled'
                         AND NOT EXISTS (SELECT 1 FROM api.disputable_penalties d
                                         JOIN api.escrow_verification v ON v.escrow_id = d.escrow_id
                                         WHERE d.epoch_index = r.epoch_index AND d.participant = r.participant
                                           AND v.failure IS NOT NULL))
                FROM api.restitution_impact r {_WHERE} GROUP BY 1""")}
        p.total_penalties = q(f"SELECT count(*) FROM api.disputable_penalties {_WHERE}")[0][0]
        p.penalties = q(f"""SELECT d.epoch_index, d.participant, d.escrow_id, d.inference_id, d.penalty, d.rule,
                                   d.verdict, d.evidence, d.evidence_level, v.failed_check, v.failed_nonce, v.failure
                            FROM (SELECT * FROM api.disputable_penalties {_WHERE}
                                  ORDER BY epoch_index, participant, escrow_id, inference_id LIMIT {MAX_ROWS}) d
                            LEFT JOIN api.escrow_verification v ON v.escrow_id = d.escrow_id
                            ORDER BY d.epoch_index, d.participant, d.escrow_id, d.inference_id""")
        p.levels = q(f"""SELECT level, count(*) FROM api.escrow_verification {_WHERE}
                         GROUP BY 1 ORDER BY fn.evidence_rank(level)""")
        p.failures = q(f"""SELECT epoch_index, escrow_id, failed_check, failed_nonce, failure
                           FROM api.escrow_verification {_WHERE} AND failed_check IS NOT NULL
                           ORDER BY epoch_index, escrow_id LIMIT {MAX_ROWS}""")
        p.limits = q(f"""SELECT epoch_index, model_id, governance_limit, limit_source, loophole_risk,
                                array_to_string(model_args, ' ') FROM api.model_limits {_WHERE}
                         ORDER BY epoch_index, model_id""")
    return p


def _e(v) -> str:
    return html_text("—" if v is None else v)


def _gnk(ngonka) -> str:
    """GONKA with six decimals, truncated, as the restitution report writes it (one formatter for both)."""
    return "—" if ngonka is None else f"{gonka(ngonka)} GONKA"


def _stake(p: Page, epoch: int) -> str:
    """The amount to restitute and, when there is one, how much of it rests on escrow logs verified to settled
    (marked when not all of it does)."""
    if p.stake_by_epoch is None:
        return "<p>To restitute: <b>not computed yet</b></p>"
    total, settled = p.stake_by_epoch.get(epoch, (None, None))
    out = f"<p>To restitute: <b>{_gnk(total)}</b></p>"
    if total:
        mark = "" if settled == total else ' class="below"'
        out += f"<p{mark}>of which on logs verified to settled: <b>{_gnk(settled or 0)}</b></p>"
    return out


def _rule_colours(p: Page) -> dict[str, str]:
    rules = sorted({r for by in p.rules_by_epoch.values() for r in by} | {row[5] for row in p.penalties})
    return {r: RULE_COLOURS[i % len(RULE_COLOURS)] for i, r in enumerate(rules)}


def _rule_bar(by_rule: dict[str, int], colours: dict[str, str]) -> str:
    """One stacked bar of disputable penalties by rule family (viewBox units: percent of the epoch's total)."""
    total = sum(by_rule.values())
    if not total:
        return '<svg class="bar" viewBox="0 0 100 8" preserveAspectRatio="none" role="img" aria-label="none">' \
               '<rect x="0" y="0" width="100" height="8" fill="#e8e8e8"/></svg>'
    x, parts = 0.0, []
    for rule in sorted(by_rule):
        w = 100 * by_rule[rule] / total
        parts.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="8" fill="{colours[rule]}">'
                     f'<title>{_e(rule)}: {by_rule[rule]}</title></rect>')
        x += w
    return f'<svg class="bar" viewBox="0 0 100 8" preserveAspectRatio="none" role="img">{"".join(parts)}</svg>'


def _cards(p: Page, colours: dict[str, str]) -> str:
    cards = []
    for epoch in p.epochs:
        affected, hosts = p.hosts_by_epoch.get(epoch, (0, 0))
        by_rule = p.rules_by_epoch.get(epoch, {})
        legend = "".join(f'<li><i style="background:{colours[r]}"></i>{_e(r)} <b>{n}</b></li>'
                         for r, n in sorted(by_rule.items()))
        cards.append(f"""<section class="card"><h3>Epoch {epoch}</h3>
<p class="big"><b>{affected}</b> of {hosts} hosts affected</p>
<p><b>{sum(by_rule.values())}</b> disputable penalties</p>{_rule_bar(by_rule, colours)}
<ul class="legend">{legend or '<li>none</li>'}</ul>
{_stake(p, epoch)}</section>""")
    return "".join(cards) or "<p>No epochs in range.</p>"


def _heatmap(p: Page) -> str:
    hosts = sorted({h for h, _ in p.matrix}, key=lambda h: (-sum(sum(p.matrix.get((h, e), (0, 0))) for e in p.epochs),
                                                             h))
    if not hosts:
        return "<p>No hosts in range.</p>"
    peak = max((sum(v) for v in p.matrix.values()), default=0) or 1
    cell, left, top = 44, 150, 22
    parts = [f'<text x="{left + i * cell + cell / 2}" y="15" class="ax" text-anchor="middle">{e}</text>'
             for i, e in enumerate(p.epochs)]
    parts.append(f'<text x="{left - 6}" y="15" class="ax axis-title" text-anchor="end">host \\ epoch</text>')
    for j, host in enumerate(hosts):
        y = top + j * (cell * 0.6)
        parts.append(f'<text x="{left - 6}" y="{y + 17}" class="ax" text-anchor="end">{_e(host)}</text>')
        for i, epoch in enumerate(p.epochs):
            missed, invalid = p.matrix.get((host, epoch), (0, 0))
            n = missed + invalid
            shade = 0.08 + 0.92 * n / peak if n else 0
            fill = f"rgba(213,62,79,{shade:.2f})" if n else "#f3f3f3"
            parts.append(f'<g class="cell" data-host="{_e(host)}" data-epoch="{epoch}">'
                         f'<rect x="{left + i * cell + 1}" y="{y}" width="{cell - 2}" height="{cell * 0.6 - 2}" '
                         f'fill="{fill}"><title>{_e(host)}, epoch {epoch}: {missed} disputable missed, {invalid} '
                         f'disputable invalid</title></rect>'
                         f'<text x="{left + i * cell + cell / 2}" y="{y + 17}" text-anchor="middle" class="n">'
                         f'{n or ""}</text></g>')
    width, height = left + len(p.epochs) * cell + 4, top + len(hosts) * cell * 0.6 + 4
    return (f'<div class="scroll"><svg id="heatmap" viewBox="0 0 {width} {height:.0f}" width="{width}" '
            f'role="img" aria-label="disputable penalties per host and epoch">{"".join(parts)}</svg></div>')


def _penalty_rows(p: Page) -> str:
    rows = []
    for epoch, host, escrow, inference, penalty, rule, verdict, evidence, level, check, nonce, failure in p.penalties:
        ev = json.dumps(evidence, indent=1, sort_keys=True, default=str)
        note = evidence_note({"evidence_level": level, "failed_check": check, "failed_nonce": nonce,
                              "failure": failure})
        rows.append(f'<tr data-host="{_e(host)}" data-epoch="{epoch}" data-rule="{_e(rule)}"><td>{epoch}</td>'
                    f'<td>{_e(host)}</td>'
                    f'<td>{_e(escrow)}</td><td>{_e(inference)}</td><td>{_e(penalty)}</td><td>{_e(rule)}</td>'
                    f'<td>{_e(verdict)}</td>{level_cell(level)}<td><details><summary>evidence</summary>'
                    + (f'<p class="note">{html_text(note)}</p>' if note else "")
                    + f'<pre>{html.escape(ev)}</pre></details></td></tr>')
    return "".join(rows)


def _verification(p: Page) -> str:
    """Escrows per evidence level in range, then every escrow that failed a check, with the nonce and the reason."""
    if not p.levels:
        return "<p>No escrows in range.</p>"
    below = ' class="below"'
    counts = ", ".join(f'<span{"" if level == "settled" else below}>{_e(level)}: <b>{n}</b></span>'
                       for level, n in p.levels)
    out = f"<p>Escrow logs by the strongest check they passed: {counts}.</p>"
    if not p.failures:
        return out + "<p>No escrow failed a verification check.</p>"
    rows = "".join(f"<tr><td>{epoch}</td><td>{_e(escrow)}</td><td>{_e(check)}</td><td>{_e(nonce)}</td>"
                   f"<td>{_e(one_line(reason or 'no reason recorded', REASON_LIMIT))}</td></tr>"
                   for epoch, escrow, check, nonce, reason in p.failures)
    return out + ('<div class="scroll"><table id="verification-failures"><thead><tr><th>epoch</th><th>escrow</th>'
                  f"<th>failed check</th><th>nonce</th><th>reason</th></tr></thead><tbody>{rows}</tbody></table></div>")


def _options(values) -> str:
    return "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in sorted(set(values)))


_CSS = """
*{box-sizing:border-box}body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d1d1d;
background:#fafafa}main{max-width:1200px;margin:0 auto;padding:16px}h1{font-size:1.5em;margin:.3em 0}
h2{font-size:1.2em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd;padding-bottom:.2em}.lead{color:#444}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(230px,1fr));gap:12px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 14px}.card h3{margin:.1em 0 .3em}
.card p{margin:.3em 0}figure{margin:.8em 0}.big{font-size:1.1em}
svg.bar{width:100%;height:12px;display:block;margin:4px 0}
.legend{list-style:none;padding:0;margin:.3em 0;font-size:.85em}.legend i{display:inline-block;width:.8em;
height:.8em;margin-right:.4em;vertical-align:-1px}.scroll{overflow-x:auto;max-width:100%}
.ax{font-size:12px;fill:#333}.n{font-size:12px;fill:#111;pointer-events:none}.cell{cursor:pointer}
table{border-collapse:collapse;width:100%;background:#fff;font-size:.9em}th,td{border:1px solid #ddd;
padding:4px 6px;text-align:left;vertical-align:top}th{background:#f0f0f0}pre{white-space:pre-wrap;
word-break:break-word;max-width:60ch;margin:.3em 0;font-size:.85em}.filters{display:flex;flex-wrap:wrap;gap:10px;
align-items:center;margin:.5em 0}select,button{font:inherit;padding:3px 6px;max-width:100%}
.filters label{max-width:100%}.filters select{max-width:60vw}
p,li,h3{overflow-wrap:anywhere}.risk{color:#b00;font-weight:600}
.below{background:#fff1c2;font-weight:600}.note{margin:.3em 0;max-width:60ch}
@media (max-width:600px){main{padding:8px}th,td{padding:3px 4px}.hide-s{display:none}}
"""

_JS = """
(function(){
  var host=document.getElementById('f-host'), rule=document.getElementById('f-rule'), epoch='';
  var cell=document.getElementById('f-cell');
  var rows=[].slice.call(document.querySelectorAll('#penalties tbody tr')), shown=document.getElementById('shown');
  function apply(){
    var n=0;
    rows.forEach(function(r){
      var ok=(!host.value||r.dataset.host===host.value)&&(!epoch||r.dataset.epoch===epoch)&&
             (!rule.value||r.dataset.rule===rule.value);
      r.hidden=!ok; if(ok){n++;}
    });
    shown.textContent=n;
    cell.hidden=!epoch; cell.textContent=epoch?'epoch '+epoch+' only (show all)':'';
  }
  host.addEventListener('change',function(){epoch='';apply();}); rule.addEventListener('change',apply);
  function clear(){host.value='';rule.value='';epoch='';apply();}
  document.getElementById('f-clear').addEventListener('click',clear); cell.addEventListener('click',clear);
  [].slice.call(document.querySelectorAll('#heatmap .cell')).forEach(function(c){
    c.addEventListener('click',function(){
      // a cell filters to its host and epoch; clicking the selected cell again shows all rows
      if(host.value===c.dataset.host&&epoch===c.dataset.epoch){clear();return;}
      host.value=c.dataset.host; epoch=c.dataset.epoch; apply();
      document.getElementById('penalties').scrollIntoView({behavior:'smooth'});
    });
  });
  apply();
})();
"""


def render_page(p: Page, sections: tuple[str, ...] = ()) -> str:
    """The whole page; ``sections``: further HTML sections (e.g. the restitution section) placed after the
    governance limits."""
    colours = _rule_colours(p)
    hosts = [row[1] for row in p.penalties]
    rules = [row[5] for row in p.penalties]
    more = (f"<p>Showing the first {len(p.penalties)} of {p.total_penalties}; the rest are in "
            "<code>api.disputable_penalties</code>.</p>" if p.total_penalties > len(p.penalties) else "")
    limits = "".join(f'<tr><td>{e}</td><td>{_e(m)}</td><td>{_e(lim)}</td><td>{_e(src)}</td>'
                     f'<td class="{"risk" if risk else ""}">{"yes" if risk else "no"}</td>'
                     f'<td class="hide-s"><code>{_e(args)}</code></td></tr>'
                     for e, m, lim, src, risk, args in p.limits)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>devshard-indexer findings</title><style>{_CSS}</style></head><body><main>
<h1>Disputable penalties</h1>
<p class="lead">Penalties the governance-limit rules would not uphold (upstream Gonka #2078, #2093, #1903): hosts
that refused or timed out on requests that could not fit the model's governance <code>--max-model-len</code>.</p>
<h2>Per epoch</h2><div class="cards">{_cards(p, colours)}</div>
<h2>Where they concentrate: host × epoch</h2>
<p>Disputable penalties (missed + invalid) per host and epoch; darker is more. Click a cell to list
that host's in that epoch; click it again (or "show all") to list every row.</p>
{_heatmap(p)}
<h2 id="evidence">Disputable penalties with evidence</h2>
<div class="filters"><label>Host <select id="f-host"><option value="">all hosts</option>{_options(hosts)}</select>
</label><label>Rule <select id="f-rule"><option value="">all rules</option>{_options(rules)}</select></label>
<button id="f-clear" type="button">show all</button><button id="f-cell" type="button" hidden></button>
<span><b id="shown">{len(p.penalties)}</b> of
{len(p.penalties)} shown</span></div>{more}
<div class="scroll"><table id="penalties"><thead><tr><th>epoch</th><th>host</th><th>escrow</th><th>inference</th>
<th>penalty</th><th>rule</th><th>verdict</th><th>evidence level</th><th>evidence</th></tr></thead>
<tbody>{_penalty_rows(p)}</tbody>
</table></div>
<h2 id="verification">Verification of the escrow logs</h2>
<p>How far each escrow's log was verified the way the protocol signs it: signed (the user signed every diff),
replayed (every signed state root recomputed), settled (the final root is the one the chain settled). Amounts and
penalties below settled rest on a log not shown to be the one the chain settled.</p>
{_verification(p)}
<h2>Governance limits in force</h2>
<div class="scroll"><table id="limits"><thead><tr><th>epoch</th><th>model</th><th>limit</th><th>source</th>
<th>loophole risk</th><th class="hide-s">model args</th></tr></thead><tbody>{limits}</tbody></table></div>
{"".join(sections)}
</main><script>{_JS}</script></body></html>"""

"""`indexer report`: findings per epoch and per host in the terminal (the HTML page: :mod:`indexer.reports.html`),
with the evidence level of the escrow logs behind the disputable penalties and every escrow that failed a
verification check.

Reads only the `api` views, like any dashboard would.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from indexer.reports.restitution.verdicts import REASON_LIMIT, one_line, sentence

_WHERE = "WHERE (%(lo)s::bigint IS NULL OR epoch_index BETWEEN %(lo)s AND %(hi)s)"


@dataclass
class Findings:
    epochs: list[tuple]
    hosts: list[tuple]
    rules: list[tuple]
    verdicts: list[tuple]
    samples: list[tuple]
    levels: list[tuple] = field(default_factory=list)    # (epoch, evidence level, penalties, hosts)
    # (epoch, escrow, check, nonce, reason, how many more than MAX_FAILURES failed), at most MAX_FAILURES rows
    failures: list[tuple] = field(default_factory=list)


MAX_FAILURES = 20  # escrows that failed a check, listed; the rest are counted (api.escrow_verification has them)


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
            samples=q(f"""SELECT s.*, v.failed_check, v.failed_nonce, v.failure
                          FROM (SELECT DISTINCT ON (rule) epoch_index, escrow_id, inference_id, participant, penalty,
                                       rule, verdict, evidence, evidence_level
                                FROM api.disputable_penalties {_WHERE}
                                ORDER BY rule, epoch_index, escrow_id, inference_id) s
                          LEFT JOIN api.escrow_verification v ON v.escrow_id = s.escrow_id ORDER BY s.rule"""),
            levels=q(f"""SELECT epoch_index, evidence_level, count(*), count(DISTINCT participant)
                         FROM api.disputable_penalties {_WHERE}
                         GROUP BY 1, 2 ORDER BY 1, fn.evidence_rank(evidence_level)"""),
            failures=q(f"""SELECT epoch_index, escrow_id, failed_check, failed_nonce, failure,
                                  count(*) OVER () - {MAX_FAILURES}
                           FROM api.escrow_verification {_WHERE} AND failed_check IS NOT NULL
                           ORDER BY epoch_index, escrow_id LIMIT {MAX_FAILURES}"""),
        )


CELL_LIMIT = 200  # characters of one data value in a table cell or a report line (a peer chose the value)


def _bounded(text: str, most: int = 600) -> str:
    """Text a terminal line can carry: one line without control characters (:func:`one_line`), whole when short,
    else cut at the last space before ``most`` characters (a data value may be of any length; the whole evidence
    stays in api.disputable_penalties)."""
    text = one_line(text, len(str(text)) + 1)
    if len(text) <= most:
        return text
    cut = text.rfind(" ", 0, most)
    return text[:cut if cut > 0 else most] + " …"


def _cell(value) -> Text:
    """A table cell shown as the data is, never as Rich markup (model ids and participants may contain [/]), on one
    line and bounded, with control characters (a terminal escape sequence from a peer) shown as U+FFFD."""
    return Text("—" if value is None else one_line(value, CELL_LIMIT))


def _v(value) -> str:
    """A data value inside a line printed with markup: escaped for Rich, one line, bounded, no control characters."""
    return escape(one_line(value, CELL_LIMIT))


def print_report(f: Findings, console: Console) -> None:
    t = Table(title="Penalties per epoch: recorded (replay) vs disputable (rules)")
    for col in ("epoch", "missed", "invalid", "disputable missed", "disputable invalid"):
        t.add_column(col, justify="right")
    for row in f.epochs:
        t.add_row(*map(_cell, row))
    console.print(t)
    # every header stays whole at 80 columns: two-word headers on two lines keep the number columns narrow, and the
    # participant folds onto more lines when the width runs out
    h = Table(title="Per host", show_edge=False)
    for col in ("epoch", "participant", "missed", "invalid", "disp.\nmissed", "disp.\ninvalid", "chain\nmissed",
                "chain\ninvalid"):
        if col == "participant":
            h.add_column(col, overflow="fold", min_width=len(col))
        else:
            h.add_column(col, justify="right", no_wrap=True)
    for row in f.hosts:
        h.add_row(*map(_cell, row))
    console.print(h)
    r = Table(title="Disputable penalties by rule family")
    for col in ("epoch", "rule", "verdict", "penalty", "count"):
        r.add_column(col)
    for row in f.rules:
        r.add_row(*map(_cell, row))
    console.print(r)
    _print_evidence(f, console)
    if f.samples:
        console.print("[bold]One example per rule family[/] (full evidence in api.disputable_penalties):")
        for epoch, escrow, inference, host, penalty, rule, verdict, evidence, level, check, nonce, failure \
                in f.samples:
            said = sentence({"rule": rule, "penalty": penalty, "verdict": verdict, "evidence": evidence,
                             "evidence_level": level, "failed_check": check, "failed_nonce": nonce,
                             "failure": failure})
            console.print(f"  [cyan]{_v(rule)}[/] epoch {_v(epoch)} escrow {_v(escrow)} inference "
                          f"{_v(inference)}: {_v(host)} {_v(penalty)}, verdict {_v(verdict)}\n"
                          f"    {escape(_bounded(said))}", soft_wrap=True, highlight=False,
                          emoji=False)  # data such as ":thumbs_up:" stays as it is
    if not f.rules:
        console.print("[green]no disputable penalties in range[/]")


def _print_evidence(f: Findings, console: Console) -> None:
    """How far the escrow logs behind the disputable penalties were verified, then the escrows that failed a check."""
    if f.levels:
        t = Table(title="Evidence behind the disputable penalties (escrow log verification level)")
        for col in ("epoch", "evidence level", "penalties", "hosts"):
            t.add_column(col)
        for epoch, level, n, hosts in f.levels:
            shown = level if level == "settled" else f"{level} (below settled)"
            style = None if level == "settled" else "bold yellow"
            t.add_row(_cell(epoch), Text(one_line(shown, CELL_LIMIT), style=style), _cell(n), _cell(hosts))
        console.print(t)
    more = f.failures[0][5] if f.failures else 0
    for epoch, escrow, check, nonce, reason, _ in f.failures:
        at = f" at nonce {nonce}" if nonce is not None else ""
        line = (f"escrow {one_line(escrow, CELL_LIMIT)} (epoch {epoch}) failed the {one_line(check, 40)} check{at}: "
                f"{reason or 'no reason recorded'}")
        console.print(Text("verification failed: ", style="bold red") + Text(_bounded(line, REASON_LIMIT + 100)),
                      soft_wrap=True, highlight=False)
    if more > 0:
        console.print(f"  … and {more} more escrow(s) that failed a check (api.escrow_verification)")

"""`indexer report`: findings per epoch and per host in the terminal (the HTML page: :mod:`indexer.reports.html`).

Reads only the `api` views, like any dashboard would.
"""
from __future__ import annotations

from dataclasses import dataclass

import psycopg
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from indexer.reports.restitution.verdicts import sentence

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
                                 verdict, evidence
                          FROM api.disputable_penalties {_WHERE} ORDER BY rule, epoch_index, escrow_id, inference_id"""),
        )


def _bounded(text: str, most: int = 600) -> str:
    """Text a terminal line can carry: whole when short, else cut at the last space before ``most`` characters (a
    data value may be of any length; the whole evidence stays in api.disputable_penalties)."""
    if len(text) <= most:
        return text
    cut = text.rfind(" ", 0, most)
    return text[:cut if cut > 0 else most] + " …"


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
    if f.samples:
        console.print("[bold]One example per rule family[/] (full evidence in api.disputable_penalties):")
        for epoch, escrow, inference, host, penalty, rule, verdict, evidence in f.samples:
            said = sentence({"rule": rule, "penalty": penalty, "verdict": verdict, "evidence": evidence})
            console.print(f"  [cyan]{escape(str(rule))}[/] epoch {epoch} escrow {escape(str(escrow))} inference "
                          f"{inference}: {escape(str(host))} {escape(str(penalty))}, verdict {escape(str(verdict))}\n"
                          f"    {escape(_bounded(said))}", soft_wrap=True, highlight=False)
    if not f.rules:
        console.print("[green]no disputable penalties in range[/]")

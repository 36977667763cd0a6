"""Alert rules: one SQL file per rule (the file name is the rule's name), each one SELECT returning the columns of
interface.md §4."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import psycopg
from psycopg import errors

from indexer.db.paths import SQL_DIR

log = logging.getLogger(__name__)

RULES_DIR = SQL_DIR / "alerts"
COLUMNS = ("alert_key", "severity", "participant", "epoch_index", "summary", "details")
SEVERITIES = ("info", "warning", "critical")
# a rule over a view that is not there yet (e.g. api.restitution_impact before its release) is skipped, not fatal
MISSING_OBJECT = (errors.UndefinedTable, errors.UndefinedColumn, errors.UndefinedFunction, errors.InvalidSchemaName)


class RuleError(ValueError):
    """A rule file that cannot be used (names the file)."""


@dataclass(frozen=True)
class Rule:
    name: str
    path: Path
    sql: str


@dataclass
class Alert:
    rule: str
    alert_key: str
    severity: str
    participant: str | None
    epoch_index: int | None
    summary: str
    details: Any


def load_rules(extra_dirs: Iterable[Path] = ()) -> list[Rule]:
    """The packaged rules, then each extra directory's (a file there with a packaged rule's name replaces it)."""
    by_name: dict[str, Rule] = {}
    for directory in (RULES_DIR, *map(Path, extra_dirs)):
        if not directory.is_dir():
            raise RuleError(f"alert rules directory {directory} does not exist")
        for path in sorted(directory.glob("*.sql")):
            sql = path.read_text(encoding="utf-8").strip().rstrip(";")
            if not sql:
                raise RuleError(f"{path}: empty alert rule")
            by_name[path.stem] = Rule(path.stem, path, sql)
    return list(by_name.values())


def run_rule(conn: psycopg.Connection, rule: Rule) -> list[Alert]:
    """The rule's rows, checked. Runs inside the caller's transaction; the caller wraps it in a savepoint."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(COLUMNS)} FROM (\n{rule.sql}\n) AS rule_rows")  # no params: % is literal
        rows = cur.fetchall()
    alerts, seen = [], set()
    for n, (key, severity, participant, epoch, summary, details) in enumerate(rows, 1):
        where = f"{rule.path}: row {n}"
        if not key:
            raise RuleError(f"{where}: alert_key is empty")
        if not key.startswith(rule.name + ":"):
            raise RuleError(f"{where}: alert_key {key!r} must start with the rule's name and a colon "
                            f"({rule.name}:...), so two rules never share a key")
        if key in seen:
            raise RuleError(f"{where}: alert_key {key!r} returned twice")
        if severity not in SEVERITIES:
            raise RuleError(f"{where}: severity {severity!r} is not one of {', '.join(SEVERITIES)}")
        if not summary:
            raise RuleError(f"{where}: summary is empty for {key!r}")
        seen.add(key)
        alerts.append(Alert(rule.name, key, severity, participant, epoch, summary,
                            details if details is not None else {}))
    return alerts


def evaluate_rules(conn: psycopg.Connection, rules: list[Rule]) -> tuple[dict[str, list[Alert]], dict[str, str]]:
    """Every rule's alerts (by rule name), and the rules that could not run with the reason. A rule that fails does
    not stop the others, and its alerts' state is left as it was (absence cannot be judged)."""
    results: dict[str, list[Alert]] = {}
    skipped: dict[str, str] = {}
    for rule in rules:
        try:
            with conn.transaction():  # a savepoint: a failing rule leaves the evaluation's transaction usable
                results[rule.name] = run_rule(conn, rule)
        except MISSING_OBJECT as exc:
            skipped[rule.name] = f"needs {exc.diag.message_primary}"
            log.info("alert rule %s skipped: %s", rule.name, skipped[rule.name])
        except (psycopg.Error, RuleError) as exc:
            skipped[rule.name] = f"{type(exc).__name__}: {exc}".strip()
            log.error("alert rule %s (%s) failed: %s", rule.name, rule.path, exc)
    return results, skipped

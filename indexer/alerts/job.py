"""Evaluation and delivery as jobs: ``indexer alerts`` runs them on their own scheduler, ``indexer run`` beside the
poll cycle. Evaluation runs every ``interval`` seconds; delivery of due outbox rows more often, so retries keep to
their backoff."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import psycopg

from indexer.alerts.channels import Channel
from indexer.alerts.delivery import Backoff, DeliverySummary, deliver_due
from indexer.alerts.engine import EvaluationSummary, Policy, evaluate
from indexer.alerts.rules import Rule, load_rules
from indexer.db.url import first_line, is_unreachable

log = logging.getLogger(__name__)

DELIVERY_INTERVAL = 5.0  # seconds between delivery passes (retries are due on their own backoff)


@dataclass
class AlertJob:
    url: str
    channels: Mapping[str, Channel]
    policy: Policy = Policy()
    backoff: Backoff = Backoff()
    rules_dirs: Sequence[Path] = ()
    rules: list[Rule] = field(default_factory=list)
    on_evaluation: Callable[[EvaluationSummary], None] | None = None

    def __post_init__(self) -> None:
        self.rules = self.rules or load_rules(self.rules_dirs)

    def evaluate(self) -> EvaluationSummary:
        with psycopg.connect(self.url) as conn:
            summary = evaluate(conn, self.rules, list(self.channels), self.policy)
        if self.on_evaluation:
            self.on_evaluation(summary)
        return summary

    def deliver(self) -> DeliverySummary:
        return deliver_due(self.url, self.channels, backoff=self.backoff)

    def once(self) -> tuple[EvaluationSummary, DeliverySummary]:
        return self.evaluate(), self.deliver()

    def scheduled(self, interval: float) -> list[tuple[Callable[[], None], float, str]]:
        """(job, seconds, id) for an APScheduler interval trigger; each job logs its failure and the next run
        retries."""
        return [(_logged(self.evaluate, "alert evaluation"), interval, "alerts-evaluate"),
                (_logged(self.deliver, "alert delivery"), min(interval, DELIVERY_INTERVAL), "alerts-deliver")]


def _logged(fn: Callable, what: str) -> Callable[[], None]:
    def job() -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - the next run retries; the outbox keeps what is pending
            if is_unreachable(exc):
                log.warning("%s failed: the database is unreachable (%s)", what, first_line(exc))
            else:
                log.exception("%s failed", what)
    return job


def format_evaluation(s: EvaluationSummary) -> str:
    skipped = "".join(f"\n  skipped {rule}: {why}" for rule, why in sorted(s.skipped.items()))
    return (f"alerts: {s.rules} rule(s), {s.firing} firing ({s.new} new, {s.resolved} resolved), "
            f"{s.notifications} notification(s), {s.deliveries} deliver{'y' if s.deliveries == 1 else 'ies'} queued"
            f"{skipped}")


def format_delivery(d: DeliverySummary) -> str:
    return f"deliveries: {d.delivered} delivered, {d.retrying} to retry, {d.failed} failed"

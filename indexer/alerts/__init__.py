"""Alerts (interface.md §4): SQL rules → state per alert key → outbox → delivery.

* :mod:`indexer.alerts.rules` — the rule files (one SELECT each) and running them;
* :mod:`indexer.alerts.engine` — one evaluation: state changes, hysteresis, cooldown, silences, outbox rows, all in
  one transaction;
* :mod:`indexer.alerts.channels` — webhook, Slack and Telegram senders;
* :mod:`indexer.alerts.delivery` — the worker that sends due outbox rows with retries, backoff and the
  ``Idempotency-Key`` header, and records every attempt;
* :mod:`indexer.alerts.job` — evaluation + delivery as one job, for ``indexer alerts`` and ``indexer run``.
"""

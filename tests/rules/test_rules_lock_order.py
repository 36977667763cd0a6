"""A rules claim and a loader making a new epoch's partitions never deadlock: the claim locks every partitioned
parent when it starts, in the order part.ensure_epochs locks them (indexer.db.lockorder). Otherwise a claim that
had read rec.finish_tx (its payloads) and went on to rec.error_miss_tx (sql/rules/30_sibling_findings.sql) would meet
a loader holding error_miss_tx and waiting for finish_tx. Deterministic: the claim is stopped by a gate before
sql/rules/10_limits.sql until the loader waits, and is the side that would be cancelled (tests/support/locks.py)."""
from __future__ import annotations

import logging

import psycopg
import pytest

from indexer.db.deadlocks import ATTEMPTS as DEADLOCK_ATTEMPTS
from indexer.rules.run import run_rules
from tests.support.locks import Background, fixture_with_its_epoch_dirty, inject_deadlocks, never_the_victim, the_victim, waits_on_a_lock
from tests.support.verify_records import EPOCH

NEW_EPOCH = EPOCH + 1000


def test_a_rules_claim_and_a_loader_making_partitions_never_deadlock(db_url, tmp_path, caplog):
    fixture_with_its_epoch_dirty(db_url, tmp_path)
    gate, loader, claimer = (psycopg.connect(db_url) for _ in range(3))
    never_the_victim(loader)
    the_victim(claimer)
    gate.execute("LOCK TABLE rules.model_limit IN SHARE MODE")  # sql/rules/10_limits.sql rewrites it
    try:
        with caplog.at_level(logging.WARNING, logger="indexer.db.deadlocks"):
            claim = Background(lambda: run_rules(claimer))
            waits_on_a_lock(db_url, claimer.info.backend_pid)

            def make_partitions() -> int:
                made = loader.execute("SELECT part.ensure_epochs(ARRAY[%s]::bigint[])", (NEW_EPOCH,)).fetchone()[0]
                loader.commit()
                return made
            partitions = Background(make_partitions)
            waits_on_a_lock(db_url, loader.info.backend_pid)  # for a parent the claim holds
            gate.rollback()
            summary = claim.result()
            made = partitions.result()
    finally:
        for c in (gate, loader, claimer):
            c.close()
    assert summary.epochs == 1
    assert made > 0
    assert [r.getMessage() for r in caplog.records] == []  # no deadlock, not one broken and retried


def test_a_rules_claim_that_keeps_deadlocking_fails_naming_the_statement(db_url, tmp_path, caplog):
    fixture_with_its_epoch_dirty(db_url, tmp_path)
    inject_deadlocks(db_url, "rules.model_limit", DEADLOCK_ATTEMPTS)  # written by sql/rules/10_limits.sql
    with caplog.at_level(logging.WARNING, logger="indexer.db.deadlocks"), psycopg.connect(db_url) as claimer:
        with pytest.raises(psycopg.errors.DeadlockDetected) as failed:
            run_rules(claimer)
    assert failed.value.__notes__ == ["in sql/rules/10_limits.sql"]
    assert len(caplog.records) == DEADLOCK_ATTEMPTS - 1
    with psycopg.connect(db_url) as c:  # the epoch stays dirty, for the next run
        assert c.execute("SELECT epoch_index, whole FROM rules.dirty_epoch").fetchall() == [(EPOCH, True)]

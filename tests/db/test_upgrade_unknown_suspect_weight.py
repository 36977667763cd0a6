"""Migration 0062 (rules.challenge.suspect_invalid_weight may be null) on a database holding challenge rows from
before it: the rows keep their weights, an unknown weight can be stored, and the downgrade turns an unknown weight
back into the 0 the older rules wrote."""
from __future__ import annotations

import psycopg

from indexer.db import migrate

INSERT = ("INSERT INTO rules.challenge (escrow_id, inference_id, epoch_index, is_client_fault_finish, "
          "suspect_invalid_weight, suspect_voters, outcome_without_suspects, rule_version) "
          "VALUES (%s, %s, 408, false, %s, NULL, %s, 2)")


def test_challenge_rows_survive_and_the_weight_may_be_unknown(empty_db_url):
    migrate.upgrade(empty_db_url, "0061_quarantine_key")
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        c.execute(INSERT, ("7", 1001, 3, "Validated"))
        try:
            c.execute(INSERT, ("7", 1002, None, None))
        except psycopg.errors.NotNullViolation:
            pass
        else:
            raise AssertionError("0061 stores an unknown suspect weight")
    migrate.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        c.execute(INSERT, ("7", 1002, None, None))
        got = c.execute("SELECT inference_id, suspect_invalid_weight, outcome_without_suspects FROM rules.challenge "
                        "ORDER BY inference_id").fetchall()
        assert got == [(1001, 3, "Validated"), (1002, None, None)]
    migrate.downgrade(empty_db_url, "0061_quarantine_key")
    with psycopg.connect(empty_db_url) as c:
        got = c.execute("SELECT inference_id, suspect_invalid_weight FROM rules.challenge ORDER BY inference_id")
        assert got.fetchall() == [(1001, 3), (1002, 0)]

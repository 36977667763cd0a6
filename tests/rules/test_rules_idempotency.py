"""The rules stage is cheap and idempotent: it evaluates only dirty epochs, a second run changes nothing (and keeps
each finding's detected_at), `indexer rules --epochs A..B` re-evaluates exactly that range, and an amended record
re-evaluates only its own epoch."""
from __future__ import annotations

import psycopg

from indexer.cli import main as cli_main
from indexer.rules.run import EPOCHS_PER_CLAIM, run_rules
from tests.support.helpers import ingest, table_snapshot as _table_snapshot, write_lines
from tests.support.rules_kit import GOV, Log, fam3, fam4, fam6_at_least, gov_snapshot, load, new_hash, rows, stored

EPOCHS = (408, 409, 410)
RULE_TABLES = ["rules.refusal_parse", "rules.model_limit", "rules.escrow_limit", "rules.context_refusal",
               "rules.sibling_finding", "rules.suspect", "rules.challenge", "rules.disputable"]


def table_snapshot(url: str, tables: list[str]) -> dict[str, list]:
    """Every row of each table, order-independent (rules.suspect has no key, so ties must not matter)."""
    return {t: sorted(r, key=repr) for t, r in _table_snapshot(url, tables).items()}


def epoch_records(epoch: int) -> tuple[list[dict], dict]:
    """One escrow per epoch with every kind of finding: a disputable invalidation, a disputable error-miss, a
    disputable timeout, a suspect and a challenge."""
    log = Log(f"e{epoch}", epoch=epoch)
    ids = {}
    ids["invalidated"] = log.refusal(5, payload=stored(fam6_at_least(GOV, 4096)))
    log.invalidate(ids["invalidated"])
    h = new_hash()
    ids["error_missed"] = log.refusal(4, h, payload=stored(fam4(GOV, GOV - 4000, 4096)))
    log.served(6, h, input_tokens=GOV - 4000, output_tokens=30)
    log.error_miss(ids["error_missed"])
    h2 = new_hash()
    log.served(7, h2, input_tokens=GOV - 10, output_tokens=20)   # C served 400010 > 400000: a suspect
    ids["timed_out"] = log.start(5, h2)
    log.timeout(ids["timed_out"], "refused")
    return [gov_snapshot(epoch=epoch)] + log.records, ids


def load_three_epochs(db_url, tmp_path):
    records, ids = [], {}
    for e in EPOCHS:
        recs, ids[e] = epoch_records(e)
        records += recs
    load(db_url, tmp_path, records)
    return ids


def runs(conn) -> list[list[int]]:
    return [r[0] for r in rows(conn, "SELECT epochs FROM rules.run ORDER BY run_id")]


def test_first_run_finds_everything_and_second_run_evaluates_nothing(db_url, tmp_path, conn):
    load_three_epochs(db_url, tmp_path)
    counts = dict(rows(conn, "SELECT epoch_index, count(*) FROM api.disputable_penalties GROUP BY 1"))
    assert counts == {e: 3 for e in EPOCHS}
    assert conn.execute("SELECT count(*) FROM rules.dirty_epoch").fetchone()[0] == 0
    before, runs_before = table_snapshot(db_url, RULE_TABLES), runs(conn)
    assert sorted(sum(runs_before, [])) == list(EPOCHS)

    summary = run_rules(conn)
    assert (summary.epochs, summary.parsed) == (0, 0)
    assert table_snapshot(db_url, RULE_TABLES) == before   # detected_at included
    assert runs(conn) == runs_before

    # reloading the same file is no change at all, so nothing is dirty and nothing is re-evaluated
    ingest(db_url, tmp_path / "in.ndjson", rules=True)
    assert runs(conn) == runs_before and table_snapshot(db_url, RULE_TABLES) == before


def test_epochs_range_reevaluates_only_that_range(db_url, tmp_path, conn):
    load_three_epochs(db_url, tmp_path)
    before = table_snapshot(db_url, RULE_TABLES)
    detected = dict(rows(conn, "SELECT inference_id, detected_at FROM api.disputable_penalties"))

    assert cli_main(["--database-url", db_url, "rules", "--epochs", "409..410"]) == 0
    assert runs(conn)[-1] == [409, 410]
    # re-evaluation reproduces every row, and a finding keeps the time it was first detected
    assert table_snapshot(db_url, RULE_TABLES) == before
    assert dict(rows(conn, "SELECT inference_id, detected_at FROM api.disputable_penalties")) == detected

    # only the range is rebuilt: wipe the verdicts of every epoch, then re-evaluate 409 alone
    conn.execute("DELETE FROM rules.context_refusal")
    summary = run_rules(conn, (409, 409))
    assert summary.epochs == 1 and runs(conn)[-1] == [409]
    assert rows(conn, "SELECT DISTINCT epoch_index FROM api.context_refusals") == [(409,)]


def test_amended_record_reevaluates_only_its_epoch(db_url, tmp_path, conn):
    ids = load_three_epochs(db_url, tmp_path)
    before = table_snapshot(db_url, RULE_TABLES)
    detected = dict(rows(conn, "SELECT inference_id, detected_at FROM api.disputable_penalties "
                               "WHERE epoch_index <> 409"))
    target = ids[409]["invalidated"]
    assert rows(conn, "SELECT verdict FROM api.context_refusals WHERE inference_id = %s AND epoch_index = 409",
                target) == [("over_limit",)]

    # the executor's stored body, re-fetched, shows an exact count that fits: 1000 + 4096 <= 400000
    amended = {"kind": "finish", "escrow_id": "e409", "inference_id": target,
               "diff_nonce": next(r for r in epoch_records(409)[0]
                                  if r.get("kind") == "finish" and r["inference_id"] == target)["diff_nonce"],
               "executor_slot": target % 16, "input_tokens": 0, "output_tokens": 0, "response_hash": f"{target:064x}",
               "response_payload": stored(fam3(100_000, 1000))}
    summary = ingest(db_url, write_lines(tmp_path / "amend.ndjson", [amended]))
    assert summary.amended == 1
    with psycopg.connect(db_url) as c:
        rules = run_rules(c)
    assert rules.epochs == 1
    # the amended payload was parsed (at load time) and the stored parse matches it
    assert rows(conn, "SELECT count(*) FROM rules.refusal_parse p JOIN rec.finish_tx f USING (escrow_id, inference_id) "
                      "WHERE f.escrow_id = 'e409' AND f.inference_id = %s AND p.payload_md5 = md5(f.response_payload)",
                target) == [(1,)]
    assert runs(conn)[-1] == [409]

    assert rows(conn, "SELECT verdict FROM api.context_refusals WHERE inference_id = %s AND epoch_index = 409",
                target) == [("fits",)]
    assert rows(conn, "SELECT count(*) FROM api.disputable_penalties WHERE epoch_index = 409 AND inference_id = %s",
                target) == [(0,)]
    after = table_snapshot(db_url, RULE_TABLES)
    for t in RULE_TABLES:  # the other epochs' rows are untouched
        other = lambda rs: [r for r in rs if 409 not in r and "e409" not in r]  # noqa: E731
        assert other(after[t]) == other(before[t]) and other(before[t]), t
    assert dict(rows(conn, "SELECT inference_id, detected_at FROM api.disputable_penalties "
                           "WHERE epoch_index <> 409")) == detected


def test_a_new_rule_version_re_evaluates_stale_epochs(db_url, tmp_path, conn):
    load_three_epochs(db_url, tmp_path)
    before = table_snapshot(db_url, RULE_TABLES)
    conn.execute("UPDATE rules.model_limit SET rule_version = 0 WHERE epoch_index = 408")
    summary = run_rules(conn)
    assert summary.epochs == 1 and runs(conn)[-1] == [408]
    assert table_snapshot(db_url, RULE_TABLES) == before


def test_more_epochs_than_one_claim(db_url, tmp_path, conn):
    # EPOCHS_PER_CLAIM epochs go in one transaction; the rest follow in further claims of the same run
    records, refusals = [], {}
    for e in range(500, 511):
        log = Log(f"c{e}", epoch=e)
        refusals[e] = log.refusal(5, payload=stored(fam6_at_least(GOV, 4096)))
        log.invalidate(refusals[e])
        records += [gov_snapshot(epoch=e)] + log.records
    load(db_url, tmp_path, records)
    assert sorted(sum(runs(conn), [])) == list(range(500, 511)) and len(runs(conn)) > 1
    assert dict(rows(conn, "SELECT epoch_index, inference_id FROM api.disputable_penalties "
                           "WHERE rule = 'invalidated_context_refusal' AND verdict = 'over_limit'")) == refusals
    assert conn.execute("SELECT count(*) FROM api.context_refusals WHERE refusal_kind = 'context_length'").fetchone() \
        == (11,)


def _xmins(conn, escrow_id: str) -> list:
    """Row versions of an escrow's per-escrow findings: unchanged while nothing rewrites them."""
    return rows(conn, "SELECT 'cr', inference_id, xmin::text FROM rules.context_refusal WHERE escrow_id = %s "
                      "UNION ALL SELECT 'sf', inference_id, xmin::text FROM rules.sibling_finding WHERE escrow_id = %s "
                      "UNION ALL SELECT 'el', 0, xmin::text FROM rules.escrow_limit WHERE escrow_id = %s ORDER BY 1, 2",
                escrow_id, escrow_id, escrow_id)


def test_late_records_re_evaluate_their_escrows_and_agree_with_a_whole_epoch(db_url, tmp_path, conn):
    """A late record dirties its escrow, not its whole epoch: the rules recompute that escrow's findings and the
    epoch-wide ones, leave the other escrows' rows alone, and end exactly where a whole-epoch run ends."""
    logs = [Log(f"e408{x}", epoch=408) for x in "abc"]
    finishes = {}
    for log in logs:
        iid = log.refusal(5, payload=stored(fam6_at_least(GOV, 4096)))
        log.invalidate(iid)
        h = new_hash()
        log.error_miss(log.refusal(4, h, payload=stored(fam4(GOV, GOV - 4000, 4096))))
        log.served(6, h, input_tokens=GOV - 4000, output_tokens=30)
        finishes[log.eid] = next(r for r in log.records if r["kind"] == "finish" and r["inference_id"] == iid)
    load(db_url, tmp_path, [gov_snapshot()] + [r for log in logs for r in log.records])
    assert rows(conn, "SELECT count(*) FROM api.disputable_penalties") == [(6,)]
    untouched = {e: _xmins(conn, e) for e in ("e408a", "e408c")}
    assert all(untouched.values())

    # e408b's refusal body, re-fetched, shows a count that fits: its invalidation is no longer disputable
    late = {**finishes["e408b"], "response_payload": stored(fam3(100_000, 1000))}
    ingest(db_url, write_lines(tmp_path / "late.ndjson", [late]))
    assert rows(conn, "SELECT epoch_index, whole FROM rules.dirty_epoch") == [(408, False)]
    assert rows(conn, "SELECT escrow_id, epoch_index FROM rules.dirty_escrow") == [("e408b", 408)]
    run_rules(conn)
    assert rows(conn, "SELECT count(*) FROM rules.dirty_escrow") == [(0,)]
    assert rows(conn, "SELECT escrow_id FROM api.disputable_penalties WHERE rule = 'invalidated_context_refusal' "
                      "ORDER BY 1") == [("e408a",), ("e408c",)]
    assert {e: _xmins(conn, e) for e in untouched} == untouched
    incremental = table_snapshot(db_url, RULE_TABLES)

    run_rules(conn, (408, 408))  # the whole epoch, every escrow recomputed
    assert {e: _xmins(conn, e) for e in untouched} != untouched
    assert table_snapshot(db_url, RULE_TABLES) == incremental


def test_an_epoch_level_change_widens_an_escrow_mark(db_url, tmp_path, conn):
    """A new snapshot for an epoch that already has an escrow-level mark re-evaluates every escrow of it."""
    log = Log("e408a", epoch=408)
    log.invalidate(log.refusal(5, payload=stored(fam6_at_least(GOV, 4096))))
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    conn.execute("INSERT INTO rules.dirty_epoch (epoch_index, whole) VALUES (408, false)")
    conn.commit()
    ingest(db_url, write_lines(tmp_path / "snap.ndjson", [gov_snapshot(limit=1_000_000)]))
    assert rows(conn, "SELECT epoch_index, whole FROM rules.dirty_epoch") == [(408, True)]
    run_rules(conn)
    assert rows(conn, "SELECT governance_limit FROM rules.escrow_limit WHERE escrow_id = 'e408a'") == [(1_000_000,)]


def test_each_run_row_counts_its_own_claim(db_url, tmp_path, conn):
    """rules.run holds each claim's own figures: the payloads it parsed, and a finish after its start."""
    records = []
    for e in range(500, 511):
        log = Log(f"c{e}", epoch=e)
        log.invalidate(log.refusal(5, payload=stored(fam6_at_least(GOV, 4096))))
        records += [gov_snapshot(epoch=e)] + log.records
    load(db_url, tmp_path, records)
    conn.execute("DELETE FROM rules.refusal_parse")  # parsed at load time: make the rules parse them again
    conn.commit()
    run_rules(conn, (500, 510))
    last = rows(conn, "SELECT parsed_payloads, cardinality(epochs), finished_at > started_at FROM rules.run "
                      "ORDER BY run_id DESC LIMIT 2")
    assert sorted(last) == sorted([(n, n, True) for n in (EPOCHS_PER_CLAIM, 11 - EPOCHS_PER_CLAIM)])


def test_a_new_parser_version_re_parses_and_re_evaluates_clean_epochs(db_url, tmp_path, conn):
    from indexer.refusals import PARSER_VERSION

    load_three_epochs(db_url, tmp_path)
    before = table_snapshot(db_url, RULE_TABLES)
    conn.execute("UPDATE rules.refusal_parse SET parser_version = 0 WHERE escrow_id = 'e409'")
    conn.commit()
    summary = run_rules(conn)
    assert summary.epochs == 1 and runs(conn)[-1] == [409] and summary.parsed > 0
    assert rows(conn, "SELECT DISTINCT parser_version FROM rules.refusal_parse") == [(PARSER_VERSION,)]
    assert table_snapshot(db_url, RULE_TABLES) == before


def test_reloading_a_payload_leaves_its_parse_row_alone(db_url, tmp_path, conn):
    load_three_epochs(db_url, tmp_path)
    versions = rows(conn, "SELECT escrow_id, inference_id, xmin::text FROM rules.refusal_parse ORDER BY 1, 2")
    records = [r for e in EPOCHS for r in epoch_records(e)[0]]
    ingest(db_url, write_lines(tmp_path / "again.ndjson", records), rules=True)  # a new file, the same payloads
    assert rows(conn, "SELECT escrow_id, inference_id, xmin::text FROM rules.refusal_parse ORDER BY 1, 2") == versions

"""The poller's state travels with an export (indexer.load.pollstate): a database rebuilt from `indexer export`
polls on where the old one stood, a database that has its own state keeps it, and a state line that does not type
is quarantined with its field."""
from __future__ import annotations

import json

import psycopg

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.load.export import export_records
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from tests.support.helpers import LOAD_TIMES, db_state, ingest, write_lines

FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=8)
KEPT = {  # what a round trip keeps of each table, in a stable order
    "net.epoch_state": "SELECT epoch_index, state, escrows, escrows_final, stats_digest, stats_stable_polls, reason, "
                       "final_at FROM net.epoch_state ORDER BY 1",
    "net.cursor": "SELECT source, cursor, last_success_at FROM net.cursor WHERE cursor IS NOT NULL ORDER BY 1",
    "net.progress": "SELECT source, source_position, cursor_position, stalled_cycles, stalled_since FROM net.progress "
                    "ORDER BY 1",
    "net.awaited_payload": "SELECT escrow_id, inference_id, epoch_index, protocol_version, record, attempts, "
                           "first_missed_at, last_attempt_at, next_attempt_at, last_error, given_up_at "
                           "FROM net.awaited_payload ORDER BY 1, 2",
}


def _kept(url: str) -> dict[str, list]:
    with psycopg.connect(url) as c:
        return {table: c.execute(sql).fetchall() for table, sql in KEPT.items()}


def _records(url: str) -> dict:
    state = db_state(url, LOAD_TIMES | {"source_id", "source_line", "revision"})
    return {t: rows for t, rows in state.items() if t.startswith("rec.") and t not in ("rec.source", "rec.quarantine",
                                                                                         "rec.amendment")}


def test_a_database_rebuilt_from_an_export_polls_on_where_the_old_one_stood(db_url, second_db_url, tmp_path):
    scn = Scenario(ScenarioConfig(seed=23, epochs=3, escrows_per_epoch=2, inferences_per_escrow=8))
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        for _ in range(2):  # the second poll reads the host stats again: earlier epochs become final
            poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=FAST, private_hosts=True)
        out = tmp_path / "all.ndjson"
        counts = export_records(db_url, str(out))
        assert counts["poller_epoch_state"] > 0 and counts["poller_cursor"] > 0
        summary = ingest(second_db_url, out)
        assert summary.quarantined == 0 and summary.poller_state == sum(
            n for kind, n in counts.items() if kind.startswith("poller_"))
        kept = _kept(db_url)
        assert any(state == "final" for _, state, *_ in kept["net.epoch_state"])
        assert _kept(second_db_url) == kept

        old = poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=FAST, private_hosts=True)
        rebuilt = poll_once(second_db_url, net.chain_rest_url, net.rpc_url, policy=FAST, private_hosts=True)
    assert (rebuilt.escrows, rebuilt.epochs) == (old.escrows, old.epochs)  # the same work, not everything again
    with psycopg.connect(db_url) as a, psycopg.connect(second_db_url) as b:
        states = "SELECT epoch_index, state, escrows, escrows_final, stats_stable_polls, reason FROM net.epoch_state " \
                 "ORDER BY 1"
        assert a.execute(states).fetchall() == b.execute(states).fetchall()
    assert _records(second_db_url) == _records(db_url)


def test_state_the_database_has_is_kept_and_an_epoch_export_carries_its_own(db_url, tmp_path):
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("INSERT INTO net.epoch_state (epoch_index, state, reason) VALUES (4, 'final', 'complete'), "
                  "(5, 'settling', NULL)")
        c.execute("INSERT INTO rec.source (uri, digest) VALUES ('x', 'x')")
        c.execute("INSERT INTO net.cursor (source, cursor, last_success_at) VALUES ('chain', '900', now()), "
                  "('epoch:4', 'final', now()), ('epoch:5', 'settling', now())")
    out = tmp_path / "e4.ndjson"
    export_records(db_url, str(out), (4, 4))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["kind"], r.get("epoch_index", r.get("source"))) for r in lines] == [
        ("poller_epoch_state", 4), ("poller_cursor", "epoch:4")]
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE net.epoch_state SET state = 'open' WHERE epoch_index = 4")
    assert ingest(db_url, out).poller_state == 2
    with psycopg.connect(db_url) as c:  # its own state stays
        assert c.execute("SELECT state FROM net.epoch_state WHERE epoch_index = 4").fetchone() == ("open",)


def test_a_state_line_that_does_not_type_is_quarantined_with_its_field(db_url, conn, tmp_path):
    path = write_lines(tmp_path / "state.ndjson", [
        {"kind": "poller_epoch_state", "epoch_index": 7, "state": "done", "escrows": 0, "escrows_final": 0,
         "stats_stable_polls": 0},
        {"kind": "poller_cursor", "source": "escrow:1", "cursor": "5", "last_success_at": "yesterday"},
        {"kind": "poller_progress", "source": "escrow:1", "stalled_cycles": -1},
        {"kind": "poller_cursor", "source": "escrow:2", "cursor": "9", "last_success_at": "2026-12-01T10:00:00+00:00"},
        b'{"kind": "poller_cursor", "source": '])
    summary = ingest(db_url, path)
    assert (summary.poller_state, summary.quarantined) == (1, 4)
    assert conn.execute("SELECT line, reason FROM api.quarantine ORDER BY line").fetchall() == [
        (1, "poller_epoch_state: field state: not one of open, settling, final"),
        (2, "poller_cursor: field last_success_at: not a timestamp (ISO 8601 text)"),
        (3, "poller_progress: field stalled_cycles: not an integer from 0 to 2147483647"),
        (5, "malformed JSON: unexpected end of data at byte 37 of the line")]  # the typer's: no kind read
    assert conn.execute("SELECT source, cursor FROM net.cursor").fetchall() == [("escrow:2", "9")]

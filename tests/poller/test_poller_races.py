"""Races between the chain and a poll cycle (issue 37): escrows that settle after the cycle read the settlements, an
exact parameter snapshot read again once the node pruned the epoch's height, and an epoch the chain answers 404 for
between two that answer. Each against the devnet and PostgreSQL; results compared with a clean run's rows."""
from __future__ import annotations

import psycopg
import pytest

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.devnet.epochviews import end_height
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy

FAST = dict(backoff_base=0.0005, backoff_max=0.002, timeout=5.0, attempts=3)
WINDOW = 2
# the views the settlement order and the parameters feed (the restitution SPRT runs in settled_height order)
RESTITUTION = ("api.restitution_steps", "api.restitution_outcomes", "api.policy_whatif", "api.restitution_impact")


@pytest.fixture(scope="module")
def scn() -> Scenario:
    return Scenario(ScenarioConfig(seed=7, epochs=2, escrows_per_epoch=3, inferences_per_escrow=16))


def _poll(url, net):
    return poll_once(url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), decode_workers=0,
                     private_hosts=True)


def _rows(url, table) -> set[tuple]:
    with psycopg.connect(url) as c:
        cols = [r[0] for r in c.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema || '.' || table_name = %s "
            "AND column_name NOT IN ('loaded_at', 'amended_at', 'source_id', 'source_line', 'revision') "
            "ORDER BY ordinal_position", (table,))]
        return set(c.execute(f"SELECT {', '.join(f'{n}::text' for n in cols)} FROM {table}").fetchall())


def _results(url) -> dict[str, set[tuple]]:
    return {t: _rows(url, t) for t in ("rec.escrow", "rec.epoch_params") + RESTITUTION}


def _to_the_end(url, net, scn) -> None:
    """A poll at the current clock, then one per epoch until every epoch of the scenario has left the window."""
    while True:
        _poll(url, net)
        if net.devnet.current_epoch >= scn.epochs[-1].epoch_index + WINDOW + 1:
            return
        net.advance_epoch()


def _same(got: dict[str, set[tuple]], want: dict[str, set[tuple]]) -> None:
    for table in want:
        assert got[table] == want[table], (table, sorted(got[table] - want[table])[:3],
                                           sorted(want[table] - got[table])[:3])


def _escrows(url, ids) -> dict[str, tuple]:
    """escrow id → (settled_height of its record, its escrow-final cursor)"""
    with psycopg.connect(url) as c:
        rows = dict(c.execute("SELECT escrow_id, extra ->> 'settled_height' FROM rec.escrow WHERE escrow_id = ANY(%s)",
                              (list(ids),)).fetchall())
        final = dict(c.execute("SELECT split_part(source, ':', 2), cursor FROM net.cursor WHERE source = ANY(%s)",
                               ([f"escrow-final:{e}" for e in ids],)).fetchall())
    return {e: (rows.get(e), final.get(e)) for e in ids}


@pytest.fixture(scope="module")
def clean(pg_admin_url, template_db, scn):
    from indexer.db.scratch import scratch_database

    with scratch_database(pg_admin_url, "indexer_races_ref", template=template_db) as url:
        with DevnetServer(scn) as net:
            _to_the_end(url, net, scn)
        yield _results(url)


def test_escrows_settled_during_the_cycle_get_their_height(db_url, scn, clean):
    """The chain settles the current epoch's escrows after the cycle read the settlements: each is found settled
    with no settlement in what the cycle read. Its height is looked up before it is final, so the restitution's
    SPRT order and every row downstream are a clean run's."""
    first = scn.epochs[0]
    ids = [e.escrow_id for e in first.escrows]
    with DevnetServer(scn) as net:
        net.devnet.tick_after_settlement_search = True
        _poll(db_url, net)
        assert net.devnet.current_epoch == first.epoch_index + 1 and not net.devnet.tick_after_settlement_search
        heights = {e.escrow_id: str(net.devnet.settle_height(e)) for e in first.escrows}
        got = _escrows(db_url, ids)
        assert {e: h for e, (h, _) in got.items()} == heights
        assert all(cursor is not None for _, cursor in got.values())  # final: not fetched again
        _to_the_end(db_url, net, scn)
    _same(_results(db_url), clean)
    assert clean["api.restitution_steps"] and clean["api.policy_whatif"]  # the comparison compared something


@pytest.mark.parametrize("fault", ["unindexed_settlements", "failing_settlement_searches"])
def test_a_settled_escrow_without_a_known_height_is_not_final(db_url, scn, clean, fault):
    """The escrow's own settlement search finds nothing (the node's tx index lags) or fails: it stays not final,
    said in net.failure, and the next cycle (whose settlement search lists it) makes it final with its height."""
    first = scn.epochs[0]
    victim = first.escrows[0]
    with DevnetServer(scn) as net:
        setattr(net.app.options, fault, (victim.escrow_id,))
        net.devnet.tick_after_settlement_search = True
        _poll(db_url, net)
        got = _escrows(db_url, [e.escrow_id for e in first.escrows])
        assert got[victim.escrow_id] == (None, None)  # stored, settled, neither height nor final
        assert all(h and c for e, (h, c) in got.items() if e != victim.escrow_id)
        with psycopg.connect(db_url) as c:
            errors = [e for (e,) in c.execute("SELECT error FROM net.failure WHERE source = %s",
                                              (f"escrow:{victim.escrow_id}",))]
        want = "no settlement event" if fault == "unindexed_settlements" else "settlement height unknown: "
        assert any(want in e for e in errors), errors
        setattr(net.app.options, fault, ())
        _poll(db_url, net)  # same clock: the settlement search now lists it
        assert _escrows(db_url, [victim.escrow_id])[victim.escrow_id] == (str(net.devnet.settle_height(victim)),
                                                                          str(victim.last_nonce))
        _to_the_end(db_url, net, scn)
    _same(_results(db_url), clean)


def test_an_exact_snapshot_survives_a_later_capture(db_url, scn, clean):
    """Epoch E's parameters read as of its end (the cycle at E + 1) stay when the cycle at E + 2, the node having
    pruned that height, reads live values."""
    first = scn.epochs[0].epoch_index
    with DevnetServer(scn) as net:
        net.advance_epoch()
        _poll(db_url, net)
        end = end_height(net.devnet, first)
        net.advance_epoch()
        _poll(db_url, net)
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT params_exact, params_height FROM rec.epoch_params WHERE epoch_index = %s",
                        (first,)).fetchone()
    assert row == (True, end)
    mine = {r for r in _rows(db_url, "rec.epoch_params") if r[0] == str(first)}
    assert mine and mine == {r for r in clean["rec.epoch_params"] if r[0] == str(first)}


def _snapshot_status(url, epoch):
    with psycopg.connect(url) as c:
        status = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s",
                           (f"snapshot:{epoch}:root",)).fetchone()
        failures = c.execute("SELECT url, error FROM net.failure WHERE source = %s",
                             (f"snapshot:{epoch}:root",)).fetchall()
        state = c.execute("SELECT state FROM net.epoch_state WHERE epoch_index = %s", (epoch,)).fetchone()
    return status, failures, state


@pytest.mark.parametrize("earlier", ["answered", "stored", "escrows"])
def test_an_epoch_missing_between_two_that_answer_is_a_failure_retried(db_url, earlier):
    """A 404 for epoch_group_data/<E> while a later epoch answers and an earlier one answered in the same cycle
    (or, out of the window now, is stored), or the missing epoch has escrows (the chain's first epoch here): a
    failed read naming the epoch and URL in net.failure and api.ingest_status, the epoch not final; resolved once
    the node answers. Epochs with nothing before them and no escrows (before the chain's first) stay silent."""
    scn = Scenario(ScenarioConfig(seed=7, epochs=4, escrows_per_epoch=1, inferences_per_escrow=8))
    first = scn.epochs[0].epoch_index
    missing = first if earlier == "escrows" else first + 1
    with DevnetServer(scn) as net:
        if earlier == "escrows":  # the first cycle at first + 1: nothing answers before the missing epoch
            net.advance_epoch()
        elif earlier == "answered":  # the first cycle at first + 2: first answers in it, nothing is stored
            net.advance_epoch(), net.advance_epoch()
        else:  # a cycle per epoch up to first + 3: first left the window, stored
            _poll(db_url, net)
            for before_genesis in (first - 2, first - 1):  # no epoch answers before them: not a failure
                assert _snapshot_status(db_url, before_genesis)[:2] == (None, [])
            for _ in range(2):
                net.advance_epoch()
                _poll(db_url, net)
            net.advance_epoch()
        net.app.options.missing_epochs = (missing,)
        for _ in range(3):  # stats stable, escrows final: only the missing group keeps it from being final
            _poll(db_url, net)
        status, failures, state = _snapshot_status(db_url, missing)
        why = "tx_search lists escrows of it" if earlier == "escrows" else "epochs before and after it answer"
        assert status and f"epoch {missing} has no epoch group (HTTP 404) although {why}" in status[0], status
        assert failures and all(f"epoch_group_data/{missing}" in u and f"epoch {missing}" in e for u, e in failures)
        assert state == ("settling",)
        net.app.options.missing_epochs = ()
        _poll(db_url, net)
        _poll(db_url, net)
        status, _, state = _snapshot_status(db_url, missing)
    assert status == (None,) and state == ("final",)


def test_migration_refetches_escrows_stored_final_without_their_height(db_url, scn):
    """Data an earlier poller stored (final, settled, no settled_height): 0022 removes the final mark where the epoch
    is not final yet, and the next cycle stores the height."""
    import importlib

    upgrade = importlib.import_module("indexer.migrations.versions.0022_final_without_height").UPGRADE
    old, new = scn.epochs[0], scn.epochs[1]
    with DevnetServer(scn) as net:
        for k in range(3):  # clocks old, new, new + 1: old final, new settling
            if k:
                net.advance_epoch()
            _poll(db_url, net)
        victims = [old.escrows[0].escrow_id, new.escrows[0].escrow_id]
        with psycopg.connect(db_url) as c:
            assert dict(c.execute("SELECT epoch_index, state FROM net.epoch_state WHERE epoch_index = ANY(%s)",
                                  ([old.epoch_index, new.epoch_index],)).fetchall()) == {
                old.epoch_index: "final", new.epoch_index: "settling"}
            c.execute("UPDATE rec.escrow SET extra = extra - 'settled_height' WHERE escrow_id = ANY(%s)", (victims,))
            c.execute(upgrade)
        got = _escrows(db_url, victims)
        assert got[victims[0]][1] is not None and got[victims[1]] == (None, None)
        assert all(c for e, (_, c) in _escrows(db_url, [e.escrow_id for e in new.escrows]).items()
                   if e != victims[1])
        _poll(db_url, net)
        height = str(net.devnet.settle_height(new.escrows[0]))
    assert _escrows(db_url, [victims[1]])[victims[1]] == (height, str(new.escrows[0].last_nonce))

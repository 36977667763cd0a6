"""epoch_params / participant_epoch through `ingest` (the general path), api.epochs and fn.chain_decimal."""
from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest

from indexer.wire import chain_records as cr
from tests.support.helpers import ingest, write_lines
from tests.support.mainnet_fixtures import load


def test_chain_decimal_is_exact(conn):
    q = "SELECT fn.chain_decimal(%s::jsonb)"
    cases = {'{"value": "-475", "exponent": -6}': Decimal("-0.000475"), '{"value": "4", "exponent": 1}': Decimal("40"),
             '{"exponent": -2, "value": "18"}': Decimal("0.18"), '{"value": "1", "exponent": 9}': Decimal("1000000000"),
             '"0.05"': Decimal("0.05"), "12": Decimal("12"), "null": None, '{"value": null, "exponent": 0}': None}
    for arg, want in cases.items():
        got = conn.execute(q, (arg,)).fetchone()[0]
        assert got == want and (want is None or str(got) == str(want)), arg
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        conn.execute(q, ('{"value": "x1", "exponent": 0}',))


def test_ingested_snapshot_shows_in_api_epochs(db_url, tmp_path):
    group = cr.root_group(load("epoch_group_data_267.json"), 267)
    params = cr.epoch_params_record(267, group, load("params_e267.json"), 4136542, True)
    people = cr.participant_epoch_records(267, cr.validation_weights(group), {}, {})
    bad = {"kind": "epoch_params", "epoch_index": 268, "validation_params": {"binom_test_p0": 0.1}}
    summary = ingest(db_url, write_lines(tmp_path / "e.ndjson", [
        cr.epoch_record_from_group(group), params, *people, bad]))
    assert summary.quarantined == 1
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT start_height, end_height, state, binom_test_p0, false_positive_rate, "
                        "bad_participant_invalidation_rate, invalidation_h_threshold, params_exact, params_height, "
                        "validation_params = %s::jsonb FROM api.epochs WHERE epoch_index = 267",
                        (psycopg.types.json.Jsonb(group["validation_params"]),)).fetchone()
        reason = c.execute("SELECT reason FROM rec.quarantine WHERE kind = 'epoch_params'").fetchone()
        n = c.execute("SELECT count(*), sum(confirmation_weight) FROM rec.participant_epoch").fetchone()
    assert row == (4120752, 4136542, None, Decimal("0.1"), Decimal("0.05"), Decimal("0.1"), Decimal("4"), True,
                   4136542, True)
    assert reason and "validation_params" in reason[0] and "float" in reason[0]
    assert n[0] == 51 and n[1] == sum(w["confirmation_weight"] for w in cr.validation_weights(group).values())


@pytest.mark.parametrize("decimal, fault", [
    ({"value": "5", "exponent": 2 ** 63 - 1}, "exponent must be an integer in -16383..131053, got 9223372036854775807"),
    ({"value": "5", "exponent": -16384}, "exponent must be an integer in -16383..131053, got -16384"),
    ({"value": "5", "exponent": True}, "exponent must be an integer"),
    ({"value": "5x", "exponent": -2}, "value must be a 64-bit integer, got '5x'"),
    ({"value": str(2 ** 63), "exponent": -2}, "value must be a 64-bit integer"),
])
def test_a_decimal_the_views_cannot_read_is_quarantined_with_its_path(db_url, tmp_path, decimal, fault):
    # fn.chain_decimal reads {value, exponent} as numeric: past numeric's range it raised in every view over the
    # epoch (api.epochs, the restitution views), for every reader. Refused at the load, with where it is.
    good = {"value": "5", "exponent": -2}
    records = [{"kind": "epoch_params", "epoch_index": 270, "params_exact": True,
                "validation_params": {"false_positive_rate": good, "nested": [good, {"x": decimal}]}},
               {"kind": "epoch_params", "epoch_index": 271, "params_exact": True,
                "validation_params": {"false_positive_rate": {"value": "5", "exponent": "-2"}, "binom_test_p0": good,
                                      "zero": {"exponent": 0}, "missing_exponent": {"value": "7"}}}]
    summary = ingest(db_url, write_lines(tmp_path / "d.ndjson", records))
    assert summary.quarantined == 1
    with psycopg.connect(db_url) as c:
        reason, = c.execute("SELECT reason FROM rec.quarantine WHERE kind = 'epoch_params'").fetchone()
        got = c.execute("SELECT epoch_index, false_positive_rate, binom_test_p0 FROM api.epochs").fetchall()
    assert reason.startswith(f"field validation_params.nested[1].x: a decimal's {fault}")
    assert got == [(271, Decimal("0.05"), Decimal("0.05"))]


def _params(exact: bool | None, height: int | None, threshold: str) -> dict:
    rec = {"kind": "epoch_params", "epoch_index": 408, "total_weight": 10,
           "bitcoin_reward_params": {"initial_epoch_reward": threshold}}
    if exact is not None:
        rec.update(params_exact=exact, params_height=height)
    return rec


@pytest.mark.parametrize("later, kept", [
    ((False, 9000, "live"), True),    # live values read once the node pruned the epoch's height
    ((None, None, "failed"), True),   # the /params read failed: no parameters at all
    ((True, 5001, "other"), False),   # another exact reading replaces it (the newer line wins, as for any kind)
])
def test_an_exact_snapshot_is_never_replaced_by_an_inexact_one(db_url, tmp_path, later, kept):
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [_params(True, 5000, "exact")]))
    summary = ingest(db_url, write_lines(tmp_path / "b.ndjson", [_params(*later)]))
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT params_exact, params_height, bitcoin_reward_params ->> 'initial_epoch_reward', "
                        "revision FROM rec.epoch_params WHERE epoch_index = 408").fetchone()
        history = c.execute("SELECT count(*) FROM rec.amendment WHERE kind = 'epoch_params'").fetchone()[0]
    if kept:
        assert row == (True, 5000, "exact", 1) and history == 0 and summary.amended == 0
    else:
        assert row == (True, 5001, "other", 2) and history == 1


def test_an_inexact_snapshot_is_replaced_by_an_exact_one(db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [_params(False, 9000, "live")]))
    ingest(db_url, write_lines(tmp_path / "b.ndjson", [_params(True, 5000, "exact")]))
    ingest(db_url, write_lines(tmp_path / "c.ndjson", [_params(False, 9100, "live again")]))
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT params_exact, params_height, bitcoin_reward_params ->> 'initial_epoch_reward' "
                        "FROM rec.epoch_params WHERE epoch_index = 408").fetchone()
    assert row == (True, 5000, "exact")


def _grant(exact: bool | None, height: int | None, pub_key: str) -> dict:
    rec = {"kind": "warm_key", "epoch_index": 408, "participant": "gonka1host", "grantee": "gonka1warm",
           "pub_key": pub_key}
    if exact is not None:
        rec.update(read_exact=exact, read_height=height)
    return rec


def test_a_grant_read_at_the_epochs_end_is_never_replaced_by_a_live_reading(db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "a.ndjson", [_grant(True, 5000, "QUJD")]))
    ingest(db_url, write_lines(tmp_path / "b.ndjson", [_grant(False, None, "REVG")]))  # from an NDJSON file
    ingest(db_url, write_lines(tmp_path / "c.ndjson", [_grant(None, None, "R0hJ")]))
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT read_exact, read_height, pub_key FROM rec.warm_key WHERE epoch_index = 408").fetchone()
    assert row == (True, 5000, "QUJD")
    ingest(db_url, write_lines(tmp_path / "d.ndjson", [_grant(True, 5001, "SktM")]))  # another exact reading wins
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT read_height, pub_key FROM rec.warm_key").fetchone() == (5001, "SktM")

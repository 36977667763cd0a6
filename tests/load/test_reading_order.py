"""Two readings of one record taken at different times give the row of the later state in any load order: an escrow
once read settled stays settled (the chain never unsettles one), and of an epoch's parameter readings the exact one,
then the one read at the higher height, stays (indexer.load.samekey, indexer.load.statements.KEEP_STORED), across
commands and inside one batch alike."""
from __future__ import annotations

import psycopg
import pytest

from tests.support.helpers import escrow, ingest, tx, write_lines

H = "ab" * 32


def _load(db_url, tmp_path, parts: list[list[dict]]) -> None:
    for i, part in enumerate(parts):
        ingest(db_url, write_lines(tmp_path / f"{i}.ndjson", part), rules=True)


def _split(one_batch: bool, first: list[dict], second: list[dict]) -> list[list[dict]]:
    return [first + second] if one_batch else [first, second]


ONE_OR_TWO = pytest.mark.parametrize("one_batch", [False, True], ids=["two commands", "one batch"])


def _statuses(conn) -> list[tuple]:
    return conn.execute("SELECT inference_id, status FROM api.inferences ORDER BY 1").fetchall()


@ONE_OR_TWO
@pytest.mark.parametrize("settled_first", [True, False], ids=["settled reading first", "settled reading last"])
def test_an_escrow_read_settled_stays_settled(db_url, second_db_url, conn, tmp_path, one_batch, settled_first):
    txs = [tx("start", 1, 1, prompt_hash=H, max_tokens=100, input_length=10), tx("confirm_start", 1, 2)]
    readings = [escrow(settled=True), escrow(settled=False)]
    first, second = readings if settled_first else readings[::-1]
    _load(db_url, tmp_path, _split(one_batch, [first, *txs], [second]))
    assert conn.execute("SELECT settled FROM rec.escrow").fetchone() == (True,)
    # the replay saw a settled escrow: the rows of a load of the settled reading alone
    ingest(second_db_url, write_lines(tmp_path / "settled.ndjson", [escrow(settled=True), *txs]), rules=True)
    with psycopg.connect(second_db_url) as other:
        assert _statuses(conn) == _statuses(other)
    # a later reading that leaves the flag out, or says false, does not clear it
    _load(db_url, tmp_path, [[escrow()], [escrow(settled=False)]])
    assert conn.execute("SELECT settled FROM rec.escrow").fetchone() == (True,)


def test_an_escrow_read_unsettled_then_without_the_flag_stays_unsettled(db_url, conn, tmp_path):
    _load(db_url, tmp_path, [[escrow(settled=False)], [escrow()]])
    assert conn.execute("SELECT settled FROM rec.escrow").fetchone() == (False,)  # null is not true


def _params(height: int | None, p0: str, exact: bool = False) -> dict:
    rec = {"kind": "epoch_params", "epoch_index": 408, "params_exact": exact,
           "validation_params": {"binom_test_p0": {"value": p0, "exponent": -2}}}
    return rec if height is None else {**rec, "params_height": height}


def _p0(conn) -> tuple:
    return conn.execute("SELECT params_height, validation_params->'binom_test_p0'->>'value', params_exact "
                        "FROM rec.epoch_params").fetchone()


@ONE_OR_TWO
@pytest.mark.parametrize("higher_first", [True, False], ids=["higher first", "higher last"])
def test_the_parameters_read_at_the_higher_height_stay(db_url, conn, tmp_path, one_batch, higher_first):
    readings = [_params(200, "20"), _params(100, "10")]
    first, second = readings if higher_first else readings[::-1]
    _load(db_url, tmp_path, _split(one_batch, [first], [second]))
    assert _p0(conn) == (200, "20", False)
    assert conn.execute("SELECT binom_test_p0 FROM api.epochs WHERE epoch_index = 408").fetchone()[0] is not None


@ONE_OR_TWO
@pytest.mark.parametrize("exact_first", [True, False], ids=["exact first", "exact last"])
def test_the_exact_parameters_stay_over_a_later_live_reading(db_url, conn, tmp_path, one_batch, exact_first):
    readings = [_params(100, "10", exact=True), _params(300, "30")]
    first, second = readings if exact_first else readings[::-1]
    _load(db_url, tmp_path, _split(one_batch, [first], [second]))
    assert _p0(conn) == (100, "10", True)


@ONE_OR_TWO
def test_a_reading_without_a_height_never_replaces_one_with_it(db_url, conn, tmp_path, one_batch):
    _load(db_url, tmp_path, _split(one_batch, [_params(100, "10")], [_params(None, "99")]))
    assert _p0(conn) == (100, "10", False)
    _load(db_url, tmp_path, [[_params(None, "99")]])
    assert _p0(conn) == (100, "10", False)


def test_readings_without_heights_keep_the_last(db_url, conn, tmp_path):
    _load(db_url, tmp_path, [[_params(None, "10")], [_params(None, "20")]])
    assert _p0(conn) == (None, "20", False)

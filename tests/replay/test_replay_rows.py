"""The database path replays rows, not Txs: each tx table's column arrays become rows (`reads._rows`, laid out by
`reads.SOURCES`), a plain sort orders them, and `replay_rows` replays them. On any log the tables' keys allow, that
must give exactly what `replay` gives on the same txs as Txs.

No database: the column arrays are built here the way the aggregate queries return them.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.replay import reads
from indexer.replay.machine import TX_KINDS, EscrowConfig, Tx, replay, replay_rows
from tests.replay.test_replay_machine import F_LOG, SLOTS_1971, configs

# A Tx field -> the column each table stores it in (interface.md: the tables' columns).
_COLUMN = {"diff_nonce": "diff_nonce", "inference_id": "inference_id", "input_tokens": "input_tokens",
           "output_tokens": "output_tokens", "reason": "reason"}
_SLOT_COLUMN = {"finish": "executor_slot", "validation": "validator_slot", "validation_vote": "voter_slot"}
_VALID_COLUMN = {"validation": "valid", "validation_vote": "vote_valid"}


def columns(tx: Tx) -> dict:
    """The row a table holds for this tx, as the database returns its columns."""
    cols = {col: getattr(tx, field) for field, col in _COLUMN.items()}
    cols[_SLOT_COLUMN.get(tx.kind, "-")] = tx.slot
    cols[_VALID_COLUMN.get(tx.kind, "-")] = tx.valid
    cols["votes"] = [{"voter_slot": s, "accept": a} for s, a in tx.votes]
    return cols


def db_rows(txs: list[Tx], rnd) -> list[tuple]:
    """Rows as reads.escrow_logs builds them: per table, column arrays in the database's (any) order, then sorted."""
    rows = []
    for _, fields in reads.SOURCES:
        kind = TX_KINDS[fields[1]]
        table = [columns(tx) for tx in txs if tx.kind == kind]
        rnd.shuffle(table)
        arrays = {c: [r[c] for r in table] for c in fields if isinstance(c, str)}
        rows.extend(reads._rows(fields, arrays))
    rnd.shuffle(rows)
    rows.sort()
    return rows


@st.composite
def stored_log(draw, n_slots: int):
    """Txs as the tables can hold them: one start/confirm/finish/timeout/error-miss per inference, one
    validation and one vote per (inference, slot); finish/validation/vote slots and verdicts, timeout reasons
    and votes always present (ingest requires them). Nonces are small so that diffs collide often."""
    ids = st.integers(0, 12)
    nonce = st.integers(0, 16)
    slot = st.one_of(st.integers(0, n_slots - 1), st.integers(0, 20))
    votes = st.lists(st.tuples(st.integers(0, n_slots + 1), st.booleans()), max_size=n_slots).map(tuple)
    txs = []
    for i in draw(st.sets(ids)):
        txs.append(Tx(i if draw(st.integers(0, 9)) else draw(nonce), "start", i))
    for i in draw(st.sets(ids)):
        txs.append(Tx(draw(nonce), "confirm_start", i))
    for i in draw(st.sets(ids)):
        txs.append(Tx(draw(nonce), "finish", i, slot=i % n_slots if draw(st.booleans()) else draw(slot),
                      input_tokens=draw(st.integers(0, 9)), output_tokens=draw(st.integers(0, 9))))
    for kind in ("validation", "validation_vote"):
        for i, s in draw(st.sets(st.tuples(ids, slot), max_size=30)):
            txs.append(Tx(draw(nonce), kind, i, slot=s, valid=draw(st.booleans())))
    for i in draw(st.sets(ids)):
        txs.append(Tx(draw(nonce), "timeout", i, reason=draw(st.sampled_from(["refused", "execution"])),
                      votes=draw(votes)))
    for i in draw(st.sets(ids)):
        txs.append(Tx(draw(nonce), "error_miss", i, votes=draw(votes)))
    return txs


@st.composite
def escrow_and_stored_log(draw):
    conf = draw(configs)
    return conf, draw(stored_log(len(conf.slots)))


@settings(max_examples=400, deadline=None)
@given(escrow_and_stored_log(), st.booleans(), st.randoms(use_true_random=False))
def test_database_rows_replay_like_txs(case, transitions, rnd):
    conf, txs = case
    assert replay_rows(conf, db_rows(txs, rnd), transitions=transitions) == replay(conf, txs, transitions=transitions)


def test_reference_scenario_through_database_rows():
    import random

    conf = EscrowConfig("1971", SLOTS_1971, 50, settled=True)
    assert replay_rows(conf, db_rows(F_LOG, random.Random(3))) == replay(conf, F_LOG)

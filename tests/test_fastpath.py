"""The generated fast path (indexer.load.fastpath) against the general path (coerce + copytext): for every record
it accepts it must render the same COPY line, scope and slot; every record the general path refuses it must
decline."""
from __future__ import annotations

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from indexer.load.coerce import COERCE, Invalid
from indexer.load.copytext import FORMATTERS
from indexer.load.fastpath import FAST
from indexer.records import BOOL, HEX, I64, ID, KINDS, REASON, STR, U32, U64, U64N, VOTES
from indexer.load.prepare import prepare_batch, slot_of

_ints = st.one_of(st.integers(-5, 5), st.integers(2**31 - 2, 2**31 + 1), st.integers(2**63 - 2, 2**64 + 1),
                  st.integers(-(2**63) - 1, -(2**63) + 1))
_texts = st.one_of(st.text(max_size=6), st.sampled_from(["a\tb", "back\\slash", "new\nline", "cr\r", "ünï", "x" * 129]))
_wrong = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False), _texts, _ints,
                   st.just([1]), st.just({"a": 1}), st.sampled_from(["12", "-3", "0xff"]))
_GOOD = {
    ID: st.one_of(st.text(min_size=1, max_size=8), st.integers(0, 2**64 - 1), st.just("e\t1")),
    U64: st.integers(0, 2**63 - 1), U64N: st.integers(0, 2**64 - 1), I64: st.integers(-(2**63) + 1, 2**63 - 1),
    U32: st.integers(0, 2**31 - 1), BOOL: st.booleans(), STR: _texts,
    HEX: st.one_of(st.text("0123456789abcdefABCDEF", max_size=8), st.just("zz")),
    REASON: st.sampled_from(["refused", "execution", "REFUSED", "timeout_reason_execution", "1", 2, "other"]),
    # votes as the normalizer writes them, and the variants only the general path takes or refuses: a decimal
    # string slot, an extra key (dropped), a slot beyond 31 bits, a non-bool accept, a vote that is no object
    VOTES: st.lists(st.one_of(
        st.fixed_dictionaries({"voter_slot": st.integers(0, 2**31 - 1), "accept": st.booleans()}),
        st.fixed_dictionaries({"accept": st.booleans(), "voter_slot": st.integers(0, 5)}),
        st.fixed_dictionaries({"voter_slot": st.sampled_from(["3", 2**31, -1]), "accept": st.booleans()}),
        st.fixed_dictionaries({"voter_slot": st.integers(0, 5), "accept": st.booleans(), "note": _texts}),
        st.fixed_dictionaries({"voter_slot": st.integers(0, 5), "accept": st.sampled_from([1, "true", None])}),
        st.just(7)), max_size=4),
}


@st.composite
def records(draw):
    name = draw(st.sampled_from(sorted(FAST)))
    obj = {"kind": name}
    for f in KINDS[name].fields:
        if not f.required and draw(st.integers(0, 3)) == 0:
            continue  # absent
        good = _GOOD.get(f.type)
        obj[f.name] = draw(good) if good is not None and draw(st.integers(0, 5)) else draw(_wrong)
    if draw(st.integers(0, 6)) == 0:
        obj["unknown_field"] = draw(st.one_of(_ints, _texts))
    return name, obj


def _general(name: str, obj: dict, n: int):
    row = (n, *COERCE[name](obj))
    return FORMATTERS[name](row, "7"), row[1 + KINDS[name].columns.index(
        "escrow_id" if KINDS[name].scope == "escrow" else "epoch_index")], slot_of(name, row)


@settings(max_examples=1500)
@given(records(), st.integers(1, 10**9))
@example(("finish", {"kind": "finish", "escrow_id": 5, "inference_id": 1, "diff_nonce": 1, "executor_slot": 0,
                     "input_tokens": 0, "output_tokens": 0, "response_payload": "context length"}), 3)
@example(("start", {"kind": "start", "escrow_id": "a\\b\tc", "inference_id": 1, "diff_nonce": 1,
                    "prompt_hash": "ABcd", "model": "m\n"}), 4)
def test_fast_path_renders_what_the_general_path_renders(record, n):
    name, obj = record
    fast = FAST[name](obj, n, "7")
    try:
        general = _general(name, obj, n)
    except Invalid:
        assert fast is None
        return
    assert fast is None or fast == general


def test_ordinary_records_take_the_fast_path():
    """The kinds that make up most of a log must not silently fall back to the general path."""
    ordinary = {
        "start": {"escrow_id": "e1", "inference_id": 7, "diff_nonce": 7, "prompt_hash": "AB01", "model": "m",
                  "input_length": 10, "max_tokens": 20, "started_at": 1_700_000_000},
        "confirm_start": {"escrow_id": "e1", "inference_id": 7, "diff_nonce": 8, "confirmed_at": 1},
        "finish": {"escrow_id": "e1", "inference_id": 7, "diff_nonce": 9, "executor_slot": 1, "input_tokens": 5,
                   "output_tokens": 6, "response_hash": "ff"},
        "validation": {"escrow_id": "e1", "inference_id": 7, "validator_slot": 2, "diff_nonce": 10, "valid": True},
        "validation_vote": {"escrow_id": "e1", "inference_id": 7, "voter_slot": 3, "diff_nonce": 11,
                            "vote_valid": False},
        "host_stats": {"escrow_id": "e1", "slot_id": 2, "missed": 1, "cost": 2**64 - 1},
    }
    for name, fields in ordinary.items():
        got = FAST[name]({"kind": name, **fields}, 1, "7")
        assert got is not None, name
        assert got == _general(name, {"kind": name, **fields}, 1)


def test_votes_take_the_fast_path_and_keep_the_general_paths_text():
    """Timeouts and error misses (vote lists) are typed on the fast path: the same COPY text and highest voter slot."""
    for name, fields in {"timeout": {"reason": "refused"}, "error_miss": {}}.items():
        obj = {"kind": name, "escrow_id": "e1", "inference_id": 7, "diff_nonce": 9, **fields,
               "votes": [{"voter_slot": 4, "accept": True}, {"accept": False, "voter_slot": 9}]}
        got = FAST[name](obj, 1, "7")
        assert got is not None and got == _general(name, obj, 1), name
        assert got[2] == 9
        line = orjson.dumps(obj)
        assert prepare_batch(7, [(1, line)]).kinds[name].copy.decode() == got[0]  # nested keys: no false duplicate
        assert FAST[name]({**obj, "votes": []}, 1, "7")[2] is None


def test_a_newer_protocols_scalar_field_stays_on_the_fast_path():
    """v5 Finish txs carry served_hash, which is no column: it is kept in `extra` exactly as the general path keeps
    it, without leaving the fast path; nested or float values still go the general way."""
    finish = {"kind": "finish", "escrow_id": "e1", "inference_id": 7, "diff_nonce": 9, "executor_slot": 1,
              "input_tokens": 5, "output_tokens": 6, "response_hash": "ff", "served_hash": "ab\tcd", "n": 2**64 - 1,
              "flag": True, "none": None}
    got = FAST["finish"](finish, 1, "7")
    assert got is not None
    assert got == _general("finish", finish, 1)
    assert '{"served_hash":"ab\\\\tcd","n":18446744073709551615,"flag":true,"none":null}' in got[0]
    for odd in ({"nested": {"a": 1}}, {"f": 1.5}, {"big": 2**64}, {"list": [1]}):
        assert FAST["finish"]({**finish, **odd}, 1, "7") is None, odd


def test_a_batch_renders_the_same_lines_on_either_path():
    """prepare_batch through the fast path == rendering each record on the general path."""
    objs = [{"kind": "start", "escrow_id": "e", "inference_id": i, "diff_nonce": i, "model": "m\t"} for i in range(5)]
    objs.append({"kind": "finish", "escrow_id": "e", "inference_id": 1, "diff_nonce": 9, "executor_slot": 3,
                 "input_tokens": 1, "output_tokens": 2, "extra_field": [1, "x"]})  # unknown field: general path
    lines = [(n, orjson.dumps(o)) for n, o in enumerate(objs, start=1)]
    prepared = prepare_batch(7, lines)
    assert prepared.kinds["start"].copy.decode() == "".join(_general("start", o, n)[0]
                                                            for n, o in enumerate(objs[:5], start=1))
    assert prepared.kinds["finish"].copy.decode() == _general("finish", objs[5], 6)[0]
    assert prepared.kinds["finish"].slot_max == {"e": 3}
    assert prepared.kinds["start"].scope == {"e"}

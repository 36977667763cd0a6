"""The generated fast path (indexer.load.typed.fastpath) against the general path (coerce + copytext): for every record
it accepts it must render the same COPY line, scope and slot; every record the general path refuses it must
decline."""
from __future__ import annotations

import json
import random

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from indexer.load.typed.coerce import COERCE, Invalid
from indexer.load.typed.copytext import FORMATTERS
from indexer.load.typed.fastpath import FAST, PREPARE_ESCAPING, PREPARE_PLAIN
from indexer.records import BOOL, HEX, I64, ID, KINDS, REASON, STR, U32, U64, U64N, VOTES
from indexer.synth import generate
from indexer.load.prepare import prepare_batch, prepare_block
from indexer.load.typed.lines import slot_of
from indexer.load.typed.structs import STRUCT_KINDS, typed_line

_ints = st.one_of(st.integers(-5, 5), st.integers(2**31 - 2, 2**31 + 1), st.integers(2**63 - 2, 2**64 + 1),
                  st.integers(-(2**63) - 1, -(2**63) + 1))
_texts = st.one_of(st.text(max_size=6), st.sampled_from(["a\tb", "back\\slash", "new\nline", "cr\r", "ünï", "x" * 129]))
_wrong = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False), _texts, _ints,
                   st.just([1]), st.just({"a": 1}), st.sampled_from(["12", "-3", "0xff"]))
_decimal_texts = st.one_of(st.integers(0, 2**64 + 1).map(str), st.sampled_from(["0", "00", "07", "9" * 18, "9" * 19,
                                                                              "1" + "0" * 19, "2147483648", "+1"]))
_GOOD = {
    ID: st.one_of(st.text(min_size=1, max_size=8), st.integers(0, 2**64 - 1), st.just("e\t1")),
    # decimal strings too: the general path takes them, the fast path where their text is already canonical
    U64: st.one_of(st.integers(0, 2**63 - 1), _decimal_texts), U64N: st.one_of(st.integers(0, 2**64 - 1), _decimal_texts),
    I64: st.integers(-(2**63) + 1, 2**63 - 1), U32: st.one_of(st.integers(0, 2**31 - 1), _decimal_texts), BOOL: st.booleans(), STR: _texts,
    HEX: st.one_of(st.text("0123456789abcdefABCDEF", max_size=8), st.just("zz")),
    VOTES: st.lists(st.one_of(st.fixed_dictionaries({"voter_slot": st.integers(-1, 2**31), "accept": st.booleans()}),
                              st.sampled_from([{"accept": True, "voter_slot": 3, "x": 1}, {"voter_slot": "3", "accept": False},
                                               {"voter_slot": True, "accept": True}, {"accept": True}, [1], 2])),
                    max_size=4),
    REASON: st.sampled_from(["refused", "execution", "TIMEOUT_REASON_REFUSED", "timeout_reason_execution", "1", 2,
                             "Refused", "other", True, None]),
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


@settings(max_examples=800)
@given(records(), st.integers(1, 10**9))
def test_the_load_variants_agree_with_fast_and_name_the_key(record, n):
    """PREPARE_ESCAPING is FAST plus the key; PREPARE_PLAIN (no COPY escaping) is used only for lines without a
    backslash, and there it renders what the escaping one renders."""
    name, obj = record
    fast, keyed = FAST[name](obj, n, "7"), PREPARE_ESCAPING[name](obj, n, "7")
    assert (keyed[:3] if keyed else None) == fast
    if keyed is not None:
        assert keyed[3] == (n, *COERCE[name](obj))[1:1 + len(KINDS[name].key)]
    if "\\" not in json.dumps(obj, ensure_ascii=False):  # the line as written has no backslash
        assert PREPARE_PLAIN[name](obj, n, "7") == keyed


def test_decimal_strings_take_the_fast_path_only_when_canonical():
    base = {"kind": "host_stats", "escrow_id": "e1", "slot_id": 2}
    assert FAST["host_stats"]({**base, "cost": "18446744073709551615"}, 1, "7") is None  # 20 digits: general
    for cost in ("2693560", "0", "9" * 19):
        got = FAST["host_stats"]({**base, "cost": cost}, 1, "7")
        assert got is not None and got == _general("host_stats", {**base, "cost": cost}, 1)
    for cost in ("007", "+1", "-1", "1.0", "١٢"):
        assert FAST["host_stats"]({**base, "cost": cost}, 1, "7") is None
    assert FAST["host_stats"]({**base, "slot_id": "2"}, 1, "7") is None  # a slot is compared: ints only


def test_a_block_counts_keys_slots_blanks_and_escapes():
    lines = [
        {"kind": "finish", "escrow_id": "a", "inference_id": 1, "diff_nonce": 1, "executor_slot": 4,
         "input_tokens": 1, "output_tokens": 2, "protocol_version": "v\\5"},
        {"kind": "finish", "escrow_id": "a", "inference_id": 2, "diff_nonce": 2, "executor_slot": 9,
         "input_tokens": 1, "output_tokens": 2},
        {"kind": "finish", "escrow_id": "b", "inference_id": 1, "diff_nonce": 3, "executor_slot": 1,
         "input_tokens": 1, "output_tokens": 2, "protocol_version": "tab\there"},
        {"kind": "validation", "escrow_id": "a", "inference_id": 1, "validator_slot": 2, "diff_nonce": 4,
         "valid": True},
        {"kind": "validation", "escrow_id": "a", "inference_id": 1, "validator_slot": 2, "diff_nonce": 5,
         "valid": False},
    ]
    raw = [orjson.dumps(o) for o in lines]
    block = b"\n".join([raw[0], b"", b"  ", *raw[1:]]) + b"\n"
    prepared = prepare_block(7, 10, block)
    assert (prepared.lines, prepared.last_line) == (5, 16)
    finish = prepared.kinds["finish"]
    assert finish.copy.decode() == "".join(_general("finish", o, n)[0] for n, o in zip((10, 13, 14), lines[:3]))
    assert "v\\\\5" in finish.copy.decode() and "tab\\there" in finish.copy.decode()
    assert finish.slot_max == {"a": 9, "b": 1} and finish.scope == {"a", "b"} and finish.distinct_keys
    assert prepared.kinds["validation"].distinct_keys is False  # (a, 1, 2) twice
    resumed = prepare_block(7, 10, block, resume_after=13)
    assert (resumed.skipped, resumed.lines, resumed.last_line) == (2, 3, 16)
    crlf = prepare_block(7, 10, block.replace(b"\n", b"\r\n"))
    assert crlf.kinds["finish"].copy == finish.copy and crlf.lines == 5


def test_timeouts_with_plain_votes_take_the_fast_path_in_a_batch():
    """Vote lists are nested objects: their keys are counted with the record's, so a duplicate inside a vote still
    goes general (and is quarantined there), while plain ones take the fast path with the general path's text."""
    obj = {"kind": "timeout", "escrow_id": "e", "inference_id": 2, "diff_nonce": 5, "reason": "TIMEOUT_REASON_REFUSED",
           "votes": [{"voter_slot": 4, "accept": True}, {"accept": False, "voter_slot": 1}]}
    fast = FAST["timeout"](obj, 1, "7")
    assert fast is not None and fast == _general("timeout", obj, 1) and fast[2] == 4
    raw = orjson.dumps(obj)
    duplicate = raw.replace(b'{"voter_slot":4,', b'{"voter_slot":9,"voter_slot":4,')
    prepared = prepare_batch(7, [(1, raw), (2, duplicate)])
    assert prepared.kinds["timeout"].copy.decode() == fast[0]
    assert [(line, reason) for _, line, _, reason, _ in prepared.rejects] == [
        (2, "duplicate key 'voter_slot' in one object")]


def test_a_newer_protocols_scalar_field_stays_on_the_fast_path():
    """v5 Finish txs carry served_hash, which is no column: it is kept in `extra` exactly as the general path keeps
    it, without leaving the fast path (in either load variant); nested or float values still go the general way."""
    finish = {"kind": "finish", "escrow_id": "e1", "inference_id": 7, "diff_nonce": 9, "executor_slot": 1,
              "input_tokens": 5, "output_tokens": 6, "response_hash": "ff", "served_hash": "ab\tcd", "n": 2**64 - 1,
              "flag": True, "none": None}
    got = FAST["finish"](finish, 1, "7")
    assert got is not None
    assert got == _general("finish", finish, 1)
    assert '{"served_hash":"ab\\\\tcd","n":18446744073709551615,"flag":true,"none":null}' in got[0]
    plain = {**finish, "served_hash": "abcd"}
    assert prepare_batch(7, [(1, orjson.dumps(plain))]).kinds["finish"].copy.decode() == _general("finish", plain, 1)[0]
    for odd in ({"nested": {"a": 1}}, {"f": 1.5}, {"big": 2**64}, {"list": [1]}):
        assert FAST["finish"]({**finish, **odd}, 1, "7") is None, odd


def _as_line(obj: dict, draw) -> bytes:
    """The record as a file line: compact, or with spaces, or its first key written twice (last one wins)."""
    style, compact = draw(st.integers(0, 3)), json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    if style == 0:
        return json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")).encode()
    if style == 1 and len(obj) > 1:
        return b'{"%s":"dup",' % next(iter(obj)).encode() + compact[1:]
    return compact


_PLAIN = {ID: st.text(st.characters(exclude_characters="\\:\"", exclude_categories=("Cs", "Cc")), min_size=1, max_size=8),
          U64: st.integers(0, 2**63 - 1), I64: st.integers(-(2**63) + 1, 2**63 - 1), U32: st.integers(0, 2**31 - 1),
          BOOL: st.booleans(), HEX: st.text("0123456789abcdefABCDEF", max_size=8)}
_PLAIN[STR] = _PLAIN[ID]


@st.composite
def plain_records(draw):
    """Records of the Struct decoder's kinds, mostly well typed (canonical decimal strings, big integers, nulls,
    unknown fields and ill-typed values sometimes): the decoder's side of the comparison must often be taken."""
    name = draw(st.sampled_from(STRUCT_KINDS))
    obj = {"kind": name}
    for f in KINDS[name].fields:
        if not f.required and draw(st.integers(0, 3)) == 0:
            continue
        pick = draw(st.integers(0, 40))
        obj[f.name] = (draw(_wrong) if pick == 0 else None if pick == 1 else draw(_decimal_texts) if pick == 2
                       else draw(_PLAIN[f.type]))
    if draw(st.integers(0, 10)) == 0:
        obj["unknown_field"] = draw(st.one_of(_ints, _texts))
    return name, obj


@settings(max_examples=1500)
@given(plain_records(), st.integers(1, 10**9), st.data())
@example(("finish", {"kind": "finish", "escrow_id": "e", "inference_id": 1, "diff_nonce": 1, "executor_slot": 0,
                     "input_tokens": "0", "output_tokens": 0, "response_payload": "context length"}), 3, None)
def test_the_struct_decoder_takes_a_line_only_as_the_general_path_reads_it(record, n, data):
    """indexer.load.typed.structs: whatever line it types, the general path accepts with the same COPY line, scope, slot
    and key; a line it cannot be sure of (an unknown field, an explicit null, a key twice, a 0/0 Finish with a
    payload) it leaves to the other paths."""
    name, obj = record
    raw = _as_line(obj, data.draw) if data is not None else json.dumps(obj, ensure_ascii=False).encode()
    got = typed_line(raw, n, "7")
    if got is None:
        return
    assert got[0] == name
    assert raw.count(b":") == len(obj) and set(obj) <= {"kind", *KINDS[name].columns}
    assert all(value is not None for value in obj.values()) and json.loads(raw) == obj
    assert got[1][:3] == _general(name, obj, n)
    assert got[1][3] == (n, *COERCE[name](obj))[1:1 + len(KINDS[name].key)]


def test_ordinary_lines_take_the_struct_decoder():
    """The bulk kinds of a log, written plainly, must not silently fall back to the slower paths."""
    for name, fields in {
        "start": {"escrow_id": "e1", "inference_id": 7, "diff_nonce": 7, "prompt_hash": "AB01", "model": "m",
                  "input_length": 10, "max_tokens": 20, "started_at": 1_700_000_000, "protocol_version": "v5"},
        "confirm_start": {"escrow_id": "e1", "inference_id": 7, "diff_nonce": 8, "confirmed_at": 1},
        "finish": {"escrow_id": "e1", "inference_id": 7, "diff_nonce": 9, "executor_slot": 1, "input_tokens": 5,
                   "output_tokens": 6, "response_hash": "ff", "tx_index": "3"},
        "validation": {"escrow_id": "e1", "inference_id": 7, "validator_slot": 2, "diff_nonce": 10, "valid": True},
        "validation_vote": {"escrow_id": "e1", "inference_id": 7, "voter_slot": 3, "diff_nonce": 11,
                            "vote_valid": False},
    }.items():
        obj = {"kind": name, **fields}
        got = typed_line(orjson.dumps(obj), 1, "7")
        assert got is not None and got[0] == name, name
        assert got[1][:3] == _general(name, obj, 1)
    start = {"kind": "start", "escrow_id": "e1", "inference_id": 7, "diff_nonce": 7}
    refusal = {"kind": "finish", "escrow_id": "e1", "inference_id": 7, "diff_nonce": 9, "executor_slot": 1,
               "input_tokens": 0, "output_tokens": 0, "response_payload": "too long"}  # parsed on the general path
    for declined in ({**start, "model": None}, {**start, "served_hash": "ab"}, {**start, "model": "a:b"},
                     {**start, "model": "a\\b"}, {**start, "escrow_id": 5}, {**start, "diff_nonce": 2**63},
                     {**start, "diff_nonce": 7.0}, refusal, {**refusal, "input_tokens": "0"},
                     {**start, "prompt_hash": "abz0"}, {**start, "prompt_hash": "ab cd"},
                     {**start, "prompt_hash": "١٢"}, {**start, "prompt_hash": "0x12"},
                     {**refusal, "input_tokens": 3, "response_hash": "g"}):
        assert typed_line(orjson.dumps(declined), 1, "7") is None, declined


def _mutated_log(seed: int = 3) -> bytes:
    """A synthetic log with one bulk-kind line in six bent the ways real files bend: a key twice, an explicit
    null, an unknown field, upper-case hex, decimal strings (canonical or not), floats, integers beyond 64 bits,
    colons and escapes inside strings, negative ids, booleans for numbers, a missing field, an integer escrow id."""
    rng = random.Random(seed)
    out = []
    for obj in generate(seed, escrows=6, inferences=40, epochs=1):
        line = orjson.dumps(obj)
        if obj["kind"] in STRUCT_KINDS and rng.random() < 1 / 6:
            field = rng.choice([k for k in obj if k != "kind"])
            bent = {**obj}
            match rng.randrange(13):
                case 0: line = b'{"%s":"dup",' % field.encode() + line[1:]
                case 1: bent["tx_index"] = None
                case 2: bent["served_hash"] = "ab"
                case 3: bent["prompt_hash"] = "ABCDEF"
                case 4: bent["diff_nonce"] = str(obj["diff_nonce"])
                case 5: bent["tx_index"] = "007"
                case 6: bent["diff_nonce"] = float(obj["diff_nonce"])
                case 7: bent["diff_nonce"] = 2**64 + 5
                case 8: bent["protocol_version"] = "v5:beta"
                case 9: bent["protocol_version"] = "v5\\x\t"
                case 10: bent[field] = True
                case 11: del bent[field]
                case 12: bent["escrow_id"] = int(obj["escrow_id"]) if obj["escrow_id"].isdigit() else 5
            if bent != obj:
                line = json.dumps(bent, ensure_ascii=False).encode()
        out.append(line)
    return b"\n".join(out) + b"\n"


def test_a_bent_log_types_the_same_with_and_without_the_struct_decoder(monkeypatch):
    """The whole block path (prepare_block): rows, counts, scopes, slots, key ranges, key verdicts, rejects with
    their reasons and refusal parses are the same whether the Struct decoder takes its lines or not."""
    block = _mutated_log()
    with_structs = prepare_block(7, 1, block)
    monkeypatch.setattr("indexer.load.prepare.typed_line", lambda raw, number, sid: None)
    without = prepare_block(7, 1, block)
    assert with_structs.kinds == without.kinds
    assert (with_structs.lines, with_structs.last_line) == (without.lines, without.last_line)
    assert with_structs.rejects == without.rejects and len(without.rejects) > 20
    assert with_structs.parses == without.parses and with_structs.escrow_sizes == without.escrow_sizes


def test_a_refusal_with_token_counts_as_decimal_strings_is_left_to_the_general_path():
    """A 0/0 Finish with a payload is parsed for its refusal on the general path, whether its counts are numbers
    or canonical decimal strings (the fast path takes such strings for other counts)."""
    refusal = {"kind": "finish", "escrow_id": "e1", "inference_id": 7, "diff_nonce": 9, "executor_slot": 1,
               "input_tokens": "0", "output_tokens": "0", "response_payload": "context length exceeded"}
    assert FAST["finish"](refusal, 1, "7") is None
    assert FAST["finish"]({**refusal, "input_tokens": 0}, 1, "7") is None
    assert FAST["finish"]({**refusal, "input_tokens": "12"}, 1, "7") is not None
    prepared = prepare_batch(7, [(1, orjson.dumps(refusal))])
    assert [(p[0], p[1]) for p in prepared.parses] == [("e1", 7)]

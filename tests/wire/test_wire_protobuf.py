"""Protobuf codec, per-version schemas and diff → record normalization (no database needed)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.wire import (
    SCHEMAS,
    VERSIONS,
    WireDecodeError,
    WireEncodeError,
    decode_diff,
    decode_tx,
    diff_from_host_json,
    diff_to_host_json,
    encode_diff,
    encode_tx,
    normalize_diffs,
)
from indexer.wire.jsonform import from_json, to_json
from indexer.wire.protobuf import I32, I64, LEN, VARINT, decode_varint, encode_varint, with_defaults

V5 = SCHEMAS["v5"]

# --------------------------------------------------------------------------- strategies

_SCALARS = {
    "uint64": st.integers(0, 2**64 - 1),
    "uint32": st.integers(0, 2**32 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "bool": st.booleans(),
    "enum": st.integers(-3, 4),
    "string": st.text(max_size=24),
    "bytes": st.binary(max_size=48),
}


def _field_strategy(schema, f):
    base = _message_strategy(schema, f.message) if f.type == "message" else _SCALARS[f.type]
    return st.lists(base, max_size=3) if f.repeated else base


def _message_strategy(schema, name):
    mt = schema.messages[name]
    if mt.oneof:
        return st.one_of([st.fixed_dictionaries({f.name: _field_strategy(schema, f)}) for f in mt.fields])
    return st.fixed_dictionaries({}, optional={f.name: _field_strategy(schema, f) for f in mt.fields})


@st.composite
def _versioned(draw, message):
    version = draw(st.sampled_from(VERSIONS))
    return version, draw(_message_strategy(SCHEMAS[version], message))


_unknown_field = st.one_of(
    st.tuples(st.integers(100, 5000), st.just(VARINT), st.integers(0, 2**64 - 1)),
    st.tuples(st.integers(100, 5000), st.just(I64), st.integers(0, 2**64 - 1)),
    st.tuples(st.integers(100, 5000), st.just(I32), st.integers(0, 2**32 - 1)),
    st.tuples(st.integers(100, 5000), st.just(LEN), st.binary(max_size=20)),
)

# --------------------------------------------------------------------------- primitives


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63, 2**64 - 1])
def test_varint_round_trip(value):
    data = encode_varint(value)
    assert decode_varint(data, 0) == (value, len(data))


def test_varint_rejects_garbage():
    with pytest.raises(WireDecodeError, match="truncated varint"):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(WireDecodeError, match="longer than 10"):
        decode_varint(b"\xff" * 11, 0)
    with pytest.raises(WireEncodeError):
        encode_varint(-1)


# --------------------------------------------------------------------------- round trips


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_versioned("DevshardTx"))
def test_tx_round_trip(case):
    version, tx = case
    schema = SCHEMAS[version]
    data = schema.encode("DevshardTx", tx)
    decoded = schema.decode("DevshardTx", data)
    assert decoded == with_defaults(schema, "DevshardTx", tx)
    assert schema.encode("DevshardTx", decoded) == data  # deterministic, lossless


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(_versioned("DiffContent"))
def test_diff_round_trip(case):
    version, diff = case
    schema = SCHEMAS[version]
    data = schema.encode("DiffContent", diff)
    assert schema.decode("DiffContent", data) == with_defaults(schema, "DiffContent", diff)


@settings(max_examples=200)
@given(_versioned("MsgFinishInference"), st.lists(_unknown_field, min_size=1, max_size=4))
def test_unknown_fields_preserved(case, extra):
    version, msg = case
    schema = SCHEMAS[version]
    data = schema.encode("MsgFinishInference", {**msg, "_unknown": extra})
    decoded = schema.decode("MsgFinishInference", data)
    assert decoded["_unknown"] == extra
    assert schema.encode("MsgFinishInference", decoded) == data


@settings(max_examples=500)
@given(st.binary(max_size=200), st.sampled_from(["DevshardTx", "DiffContent", "MsgTimeoutInference"]))
def test_random_bytes_never_crash(data, message):
    try:
        V5.decode(message, data)
    except WireDecodeError:
        pass


def test_newer_field_is_unknown_to_older_version_and_survives():
    start = {"start_inference": {"inference_id": 7, "model": "m", "protocol_version": "v5"}}
    data = encode_tx(start, "v5")
    old = decode_tx(data, "v4.1")
    assert "protocol_version" not in old["start_inference"]
    assert old["start_inference"]["_unknown"] == [(9, LEN, b"v5")]
    assert encode_tx(old, "v4.1") == data
    assert decode_tx(encode_tx(old, "v4.1"), "v5")["start_inference"]["protocol_version"] == "v5"


def test_moved_field_with_other_wire_type_is_kept_not_misread():
    # field 5 arriving length-delimited where v5 declares executor_slot (varint): keep it raw
    data = bytes([0x2A, 0x02]) + b"hi"
    decoded = V5.decode("MsgFinishInference", data)
    assert decoded["executor_slot"] == 0
    assert decoded["_unknown"] == [(5, LEN, b"hi")]


def test_packed_and_unpacked_repeated_scalars():
    packed = V5.encode("DiffContent", {"sealed_inference_ids": [1, 300]})
    unpacked = bytes([0x28, 0x01, 0x28]) + encode_varint(300)
    assert V5.decode("DiffContent", packed)["sealed_inference_ids"] == [1, 300]
    assert V5.decode("DiffContent", unpacked)["sealed_inference_ids"] == [1, 300]


def test_encode_errors_are_clear():
    with pytest.raises(WireEncodeError, match="executor_slot"):
        V5.encode("MsgFinishInference", {"executor_slot": 2**32})
    with pytest.raises(WireEncodeError, match="unknown field"):
        V5.encode("MsgFinishInference", {"nope": 1})
    with pytest.raises(WireEncodeError, match="oneof"):
        V5.encode("DevshardTx", {"heartbeat": {}, "finalize_round": {}})


# --------------------------------------------------------------------------- truncation


def _sample_diff():
    tx = {"finish_inference": {"inference_id": 6149, "response_hash": b"\xba" * 32, "executor_slot": 5,
                               "escrow_id": "1971", "served_hash": b"\xdc" * 32}}
    return encode_diff({"nonce": 6151, "txs": [tx, {"heartbeat": {}}], "escrow_id": "1971",
                        "post_state_root": b"\x01" * 32}, "v5")


def test_every_truncation_is_a_clean_error_or_a_shorter_message():
    data = _sample_diff()
    errors = 0
    for cut in range(len(data)):
        try:
            V5.decode("DiffContent", data[:cut])
        except WireDecodeError:
            errors += 1
    assert errors > len(data) // 2  # most cuts land inside a field


def test_truncated_length_delimited_field_names_the_problem():
    data = _sample_diff()
    with pytest.raises(WireDecodeError, match="truncated"):
        V5.decode("DiffContent", data[:-5])


def test_bad_wire_type_and_bad_utf8():
    with pytest.raises(WireDecodeError, match="wire type"):
        V5.decode("DevshardTx", bytes([0x0B]))  # field 1, wire type 3 (group start)
    with pytest.raises(WireDecodeError, match="UTF-8"):
        V5.decode("MsgStartInference", bytes([0x1A, 0x01, 0xFF]))
    with pytest.raises(WireDecodeError, match="field number 0"):
        V5.decode("DevshardTx", bytes([0x00, 0x00]))


# --------------------------------------------------------------------------- versions


def test_version_tables_differ_as_documented():
    assert "protocol_version" not in SCHEMAS["v4.1"].messages["MsgStartInference"].by_name
    assert "protocol_version" in SCHEMAS["v5"].messages["MsgStartInference"].by_name
    assert "served_hash" not in SCHEMAS["v4.1"].messages["MsgFinishInference"].by_name
    assert "served_hash" in SCHEMAS["v5"].messages["MsgFinishInference"].by_name
    assert "error_miss" not in SCHEMAS["v3"].messages["DevshardTx"].by_name
    assert SCHEMAS["v3"].enums["TimeoutReason"][3] == "TIMEOUT_REASON_ERROR"
    assert 3 not in SCHEMAS["v5"].enums["TimeoutReason"]


def test_error_miss_in_old_version_is_counted_not_lost():
    data = encode_tx({"error_miss": {"inference_id": 5, "votes": [{"voter_slot": 1, "accept": True}]}}, "v5")
    old = decode_tx(data, "v3")
    assert old == {"_unknown": [(14, LEN, data[2:])]}
    out = normalize_diffs("9", [{"nonce": 9, "txs": [old]}], "v3")
    assert out.records == [] and out.other == {"unknown:14": 1}


def test_old_error_reason_timeout_is_skipped_with_its_name():
    tx = decode_tx(encode_tx({"timeout_inference": {"inference_id": 4, "reason": 3}}, "v3"), "v3")
    out = normalize_diffs("9", [{"nonce": 9, "txs": [tx]}], "v3")
    assert out.other == {"timeout_inference:TIMEOUT_REASON_ERROR": 1}


# --------------------------------------------------------------------------- fixtures F4–F9

F6_PAYLOAD = (
    '{"events":["data: {\\"error\\":{\\"code\\":400,\\"message\\":\\"This model\'s maximum context length is 400000 '
    "tokens. However, you requested 4096 output tokens and your prompt contains at least 395905 input tokens, for a "
    'total of at least 400001 tokens.\\",\\"type\\":\\"BadRequestError\\"},\\"id\\":\\"devshard-1971-6149\\"}",'
    '"data: [DONE]"]}'
)


def _h(text: str) -> str:
    return text.replace("…", "")  # fixture signatures are abridged with an ellipsis


FIXTURE_TXS = [  # (diff_nonce, oneof member, msg as printed in §7)
    (6149, "start_inference", {
        "inference_id": 6149, "prompt_hash": "5b1f0a3c00000000000000000000000000000000000000000000000000000001",
        "model": "deepseek-ai/DeepSeek-V4-Flash-0731", "input_length": 395905, "max_tokens": 4096,
        "started_at": 1790812800, "observed_height": 2461234,
        "observed_block_hash": "ab00000000000000000000000000000000000000000000000000000000000001",
        "protocol_version": "v7"}),
    (6151, "finish_inference", {
        "inference_id": 6149, "response_hash": "badc0de000000000000000000000000000000000000000000000000000000003",
        "input_tokens": 0, "output_tokens": 0, "executor_slot": 5, "proposer_sig": _h("3045022100bb…"),
        "escrow_id": "1971", "observed_height": 2461238,
        "observed_block_hash": "ab00000000000000000000000000000000000000000000000000000000000003",
        "served_hash": "badc0de000000000000000000000000000000000000000000000000000000004"}),
    (6152, "finish_inference", {
        "inference_id": 6150, "response_hash": "c0ffee0000000000000000000000000000000000000000000000000000000002",
        "input_tokens": 395905, "output_tokens": 812, "executor_slot": 6, "proposer_sig": _h("3045022100aa…"),
        "escrow_id": "1971", "observed_height": 2461240,
        "observed_block_hash": "ab00000000000000000000000000000000000000000000000000000000000002",
        "served_hash": "d00d000000000000000000000000000000000000000000000000000000000002"}),
    (6170, "validation", {"inference_id": 6149, "validator_slot": 9, "valid": False,
                          "proposer_sig": _h("3045…"), "escrow_id": "1971"}),
    (6174, "validation_vote", {"inference_id": 6149, "voter_slot": 11, "vote_valid": True,
                               "proposer_sig": _h("3045…"), "escrow_id": "1971"}),
    (6175, "validation_vote", {"inference_id": 6149, "voter_slot": 0, "vote_valid": False,
                               "proposer_sig": _h("3045…"), "escrow_id": "1971"}),
    (6176, "validation_vote", {"inference_id": 6149, "voter_slot": 6, "vote_valid": False,
                               "proposer_sig": _h("3045…"), "escrow_id": "1971"}),
    (6190, "timeout_inference", {
        "inference_id": 6165, "reason": "TIMEOUT_REASON_EXECUTION",
        "votes": [{"voter_slot": 0, "accept": True, "signature": _h("3044…")},
                  {"voter_slot": 6, "accept": True, "signature": _h("3045…")},
                  {"voter_slot": 9, "accept": True, "signature": _h("3045…")},
                  {"voter_slot": 11, "accept": True, "signature": _h("3044…")}]}),
    (6201, "error_miss", {
        "inference_id": 6179,
        "votes": [{"voter_slot": 4, "accept": True, "signature": _h("3045…")},
                  {"voter_slot": 6, "accept": True, "signature": _h("3044…")},
                  {"voter_slot": 9, "accept": True, "signature": _h("3045…")},
                  {"voter_slot": 11, "accept": True, "signature": _h("3045…")}]}),
]

_T = {"protocol_version": "v5", "tx_index": 0}
EXPECTED = [
    {"kind": "start", "escrow_id": "1971", "inference_id": 6149, "diff_nonce": 6149, **_T,
     "prompt_hash": "5b1f0a3c00000000000000000000000000000000000000000000000000000001",
     "model": "deepseek-ai/DeepSeek-V4-Flash-0731", "input_length": 395905, "max_tokens": 4096,
     "started_at": 1790812800},
    {"kind": "finish", "escrow_id": "1971", "inference_id": 6149, "diff_nonce": 6151, **_T, "executor_slot": 5,
     "input_tokens": 0, "output_tokens": 0,
     "response_hash": "badc0de000000000000000000000000000000000000000000000000000000003",
     "served_hash": "badc0de000000000000000000000000000000000000000000000000000000004",
     "response_payload": F6_PAYLOAD},
    {"kind": "finish", "escrow_id": "1971", "inference_id": 6150, "diff_nonce": 6152, **_T, "executor_slot": 6,
     "input_tokens": 395905, "output_tokens": 812,
     "response_hash": "c0ffee0000000000000000000000000000000000000000000000000000000002",
     "served_hash": "d00d000000000000000000000000000000000000000000000000000000000002"},
    {"kind": "validation", "escrow_id": "1971", "inference_id": 6149, "validator_slot": 9, "diff_nonce": 6170, **_T,
     "valid": False},
    {"kind": "validation_vote", "escrow_id": "1971", "inference_id": 6149, "voter_slot": 11, "diff_nonce": 6174,
     **_T, "vote_valid": True},
    {"kind": "validation_vote", "escrow_id": "1971", "inference_id": 6149, "voter_slot": 0, "diff_nonce": 6175,
     **_T, "vote_valid": False},
    {"kind": "validation_vote", "escrow_id": "1971", "inference_id": 6149, "voter_slot": 6, "diff_nonce": 6176,
     **_T, "vote_valid": False},
    {"kind": "timeout", "escrow_id": "1971", "inference_id": 6165, "diff_nonce": 6190, **_T, "reason": "execution",
     "votes": [{"voter_slot": s, "accept": True} for s in (0, 6, 9, 11)]},
    {"kind": "error_miss", "escrow_id": "1971", "inference_id": 6179, "diff_nonce": 6201, **_T,
     "votes": [{"voter_slot": s, "accept": True} for s in (4, 6, 9, 11)]},
]


def _fixture_host_log():
    """The fixtures as a host would serve them: one diff per nonce, its DiffContent in base64 (Go JSON)."""
    entries = []
    for nonce, member, msg in FIXTURE_TXS:
        tx = {member: from_json(V5, V5.messages["DevshardTx"].by_name[member].message, msg)}
        diff = {"nonce": nonce, "txs": [tx], "escrow_id": "1971", "post_state_root": bytes(32)}
        entries.append(diff_to_host_json(diff, "v5", b"sig", bytes(32)))
    return entries


def test_fixtures_decode_to_normalized_records():
    entries = _fixture_host_log()
    assert all(decode_diff(base64.b64decode(e["diff"]["txs"], validate=True), "v5")["nonce"] == e["diff"]["nonce"]
               for e in entries)
    diffs = [diff_from_host_json(e, "v5") for e in entries]
    out = normalize_diffs("1971", reversed(diffs), "v5", payloads={6149: F6_PAYLOAD})
    assert out.records == EXPECTED
    assert not out.other


def test_fixture_json_form_round_trips():
    for _, member, msg in FIXTURE_TXS:
        name = V5.messages["DevshardTx"].by_name[member].message
        decoded = decode_tx(encode_tx({member: from_json(V5, name, msg)}, "v5"), "v5")[member]
        assert {k: v for k, v in to_json(V5, name, decoded).items() if k in msg} == msg


def test_diff_of_another_escrow_is_rejected():
    from indexer.wire import NormalizeError

    with pytest.raises(NormalizeError, match="1972"):
        normalize_diffs("1971", [{"nonce": 1, "escrow_id": "1972", "txs": []}], "v5")


def _content(nonce: int, *raw_txs: bytes) -> str:
    """A DiffContent with these raw DevshardTx bytes (field 2), in base64 as a host sends it."""
    body = encode_diff({"nonce": nonce, "txs": []}, "v5") + b"".join(b"\x12" + bytes([len(t)]) + t for t in raw_txs)
    return base64.b64encode(body).decode()


def test_host_json_garbage_is_a_wire_error():
    with pytest.raises(WireDecodeError, match="diff 1 txs: invalid base64"):
        diff_from_host_json({"diff": {"nonce": 1, "txs": "***"}}, "v5")
    good = encode_tx({"heartbeat": {}}, "v5")
    with pytest.raises(WireDecodeError, match=r"diff 1 txs\[1\]: truncated"):
        diff_from_host_json({"diff": {"nonce": 1, "txs": _content(1, good, b"\x0a\x05")}}, "v5")
    with pytest.raises(WireDecodeError, match="its DiffContent holds nonce 1"):
        diff_from_host_json({"diff": {"nonce": 2, "txs": _content(1, good)}}, "v5")
    # the devnet's old flattened form (a list of base64 txs) is not what hosts send: refused, not misread
    with pytest.raises(WireDecodeError, match="a JSON list; a host sends one base64 DiffContent"):
        diff_from_host_json({"diff": {"nonce": 1, "txs": [base64.b64encode(good).decode()]}}, "v5")
    with pytest.raises(WireDecodeError):
        diff_from_host_json({"nonce": 1}, "v5")

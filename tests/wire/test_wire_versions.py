"""Protocol versions as the chain names them, and the library path checked against an independent encoder."""

from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.poller.decode import decode_entries
from indexer.sources.gonka.host import DevshardHost
from indexer.wire import (
    SCHEMAS,
    VERSIONS,
    UnknownProtocolVersion,
    WireDecodeError,
    decode_tx,
    diff_to_host_json,
    encode_diff,
    newest,
    normalize_diffs,
    schema_for,
    version_key,
)
from indexer.wire.diffs import diff_from_host_json, diff_messages_from_host_json
from indexer.verify.diff import read_diff_content
from indexer.wire.diffs import signed_diff_record
from indexer.wire.normalize import NormalizeError, dumps_record_bytes, tx_record
from indexer.wire.txlines import TxLines

# --------------------------------------------------------------------------- an independent encoder
# Written from the protobuf encoding spec, sharing nothing with indexer.wire: what the library parses must be
# what this encoder meant, field by field.


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int32/int64/enum: ten bytes of two's complement
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        if n <= 0x7F:
            return bytes(out)
        n >>= 7


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _oracle_encode(schema, name: str, value: dict) -> bytes:
    mt = schema.messages[name]
    out = b""
    for f in sorted((mt.by_name[n] for n in value), key=lambda f: f.number):  # canonical: by field number
        v = value[f.name]
        if (f.repeated and not v) or (not mt.oneof and f.type != "message" and v in ("", b"", False, 0)):
            continue  # proto3 writes no default and no empty repeated field
        items = v if f.repeated else [v]
        if f.repeated and f.type not in ("string", "bytes", "message"):  # proto3 packs repeated scalars
            out += _key(f.number, 2) + _varint(len(b"".join(map(_varint, items)))) + b"".join(map(_varint, items))
            continue
        for item in items:
            if f.type == "message":
                body = _oracle_encode(schema, f.message, item)
            elif f.type in ("string", "bytes"):
                body = item.encode() if f.type == "string" else item
            else:
                out += _key(f.number, 0) + _varint(int(item))
                continue
            out += _key(f.number, 2) + _varint(len(body)) + body
    return out


_SCALARS = {
    "uint64": st.integers(0, 2**64 - 1), "uint32": st.integers(0, 2**32 - 1), "int64": st.integers(-(2**63), 2**63 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1), "bool": st.booleans(), "enum": st.integers(0, 3),
    "string": st.text(max_size=16), "bytes": st.binary(max_size=40),
}


def _message(schema, name):
    mt = schema.messages[name]

    def field(f):
        base = _message(schema, f.message) if f.type == "message" else _SCALARS[f.type]
        return st.lists(base, max_size=3) if f.repeated else base

    if mt.oneof:
        return st.one_of([st.fixed_dictionaries({f.name: field(f)}) for f in mt.fields])
    return st.fixed_dictionaries({}, optional={f.name: field(f) for f in mt.fields})


@st.composite
def _tx_case(draw):
    version = draw(st.sampled_from(VERSIONS))
    return version, draw(_message(SCHEMAS[version], "DevshardTx"))


def _assert_fields(schema, name: str, obj, expected: dict) -> None:
    """The parsed object carries exactly what the oracle encoded; every field not encoded holds its default."""
    mt = schema.messages[name]
    if mt.oneof:
        (member, value), = expected.items()
        assert obj.WhichOneof("tx") == member
        _assert_fields(schema, mt.by_name[member].message, getattr(obj, member), value)
        return
    for f in mt.fields:
        got = getattr(obj, f.name)
        if f.type == "message":
            want = expected.get(f.name, [])
            assert len(got) == len(want), f.name
            for g, w in zip(got, want):
                _assert_fields(schema, f.message, g, w)
        elif f.repeated:
            assert list(got) == expected.get(f.name, []), f.name
        else:
            default = {"string": "", "bytes": b"", "bool": False}.get(f.type, 0)
            assert got == expected.get(f.name, default), f.name


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_tx_case())
def test_library_parse_matches_an_independent_encoder(case):
    version, tx = case
    schema = SCHEMAS[version]
    data = _oracle_encode(schema, "DevshardTx", tx)
    obj = schema.cls("DevshardTx").FromString(data)
    _assert_fields(schema, "DevshardTx", obj, tx)
    assert obj.SerializeToString() == data  # canonical order in, the same bytes out
    # the records the normalizer builds from the object and from the dict form are the same
    by_object = normalize_diffs("7", [{"nonce": 3, "txs": [obj]}], version)
    by_dict = normalize_diffs("7", [{"nonce": 3, "txs": [decode_tx(data, version)]}], version)
    assert (by_object.records, by_object.other) == (by_dict.records, by_dict.other)


@st.composite
def _run_case(draw):
    version = draw(st.sampled_from(VERSIONS))
    txs = draw(st.lists(_message(SCHEMAS[version], "DevshardTx"), min_size=0, max_size=4))
    # real escrow ids are u64 digits; the others check that the templates keep any text as JSON, "%" included
    escrow = draw(st.one_of(st.sampled_from(["7", "18446744073709551615"]), st.text(max_size=6)))
    return version, escrow, txs


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_run_case(), st.booleans())
def test_lines_written_from_messages_are_the_records_lines(case, hold):
    """The poller's lines (indexer.wire.txlines, byte templates) are byte for byte what dumps_record_bytes writes
    of tx_record's dict, for every kind and version; a held Finish is that dict at a blank line's place."""
    version, escrow, txs = case
    schema = SCHEMAS[version]
    objs = [schema.cls("DevshardTx").FromString(_oracle_encode(schema, "DevshardTx", tx)) for tx in txs]
    got = TxLines(escrow, version, (lambda m: m.input_tokens == 0) if hold else None)
    assert got.diff(11, objs) == len(objs)
    lines, held, other = [], [], {}
    for index, obj in enumerate(objs):
        rec, name = tx_record(escrow, 11, index, obj, version)
        if rec is None:
            other[name] = other.get(name, 0) + 1
        elif hold and rec["kind"] == "finish" and rec["input_tokens"] == 0:
            held.append((len(lines), rec))
            lines.append(b"")
        else:
            lines.append(dumps_record_bytes(rec))
    assert (got.lines, got.held, dict(got.other)) == (lines, held, other)


def test_decoded_runs_are_the_normalized_records_of_the_devnet():
    """decode_entries (the poller's decode) against the dict path, normalize_diffs, over a devnet scenario's logs:
    the same lines, the same held refusals at the same places, the same tx count."""
    from indexer.devnet import Scenario, ScenarioConfig

    scn = Scenario(ScenarioConfig(seed=7, epochs=1, escrows_per_epoch=3, inferences_per_escrow=60))
    version = scn.config.protocol_version
    held_any = 0
    for eid, esc in scn.escrows.items():
        entries = [diff_to_host_json(d, version, sig, root) for d, sig, root in scn.host_diff_log(esc)]
        want = normalize_diffs(eid, [diff_messages_from_host_json(e, version, eid) for e in entries], version)
        lines, held = [], []
        for rec in want.records:
            if rec["kind"] == "finish" and rec["input_tokens"] == 0 and rec["output_tokens"] == 0:
                held.append((len(lines), rec))
                lines.append(b"")
            else:
                lines.append(dumps_record_bytes(rec))
        signed = []  # then one signed_diff line per diff: the served content string, the root its field 4 signs
        for e in entries:
            d = diff_from_host_json(e, version)
            signed.append(dumps_record_bytes(signed_diff_record(
                eid, d["nonce"], e["diff"]["txs"], d["user_sig"],
                read_diff_content(d["raw_content"]).post_state_root or d["post_state_root"], d["state_hash"],
                "gonka1host")))
        got = decode_entries(eid, version, entries, True, "gonka1host")
        assert (got.lines(), got.held) == (lines + signed, held)
        assert got.txs == len(want.records) + sum(want.other.values())
        assert decode_entries(eid, version, entries, False, "gonka1host").lines() == [
            dumps_record_bytes(r) for r in want.records] + signed
        held_any += len(held)
    assert held_any  # the scenario has refusals: the held path ran


def test_unknown_fields_survive_the_object_path_byte_for_byte():
    newer = SCHEMAS["v5"].encode("DevshardTx", {"finish_inference": {"inference_id": 9, "served_hash": b"\x01" * 32,
                                                                      "executor_slot": 3}})
    older = SCHEMAS["v4.1"].cls("DevshardTx").FromString(newer)
    assert (older.finish_inference.inference_id, older.finish_inference.executor_slot) == (9, 3)
    assert older.SerializeToString() == newer
    error_miss = SCHEMAS["v5"].encode("DevshardTx", {"error_miss": {"inference_id": 5}})
    out = normalize_diffs("9", [{"nonce": 1, "txs": [SCHEMAS["v3"].cls("DevshardTx").FromString(error_miss)]}], "v3")
    assert out.records == [] and out.other == {"unknown:14": 1}


# --------------------------------------------------------------------------- version names


def test_versions_are_the_chains_names_in_numeric_order():
    assert VERSIONS == ("v3", "v4", "v4.1", "v5")
    assert sorted(["v10", "v5", "v4.1", "v9", "v4", "dev"], key=version_key) == ["dev", "v4", "v4.1", "v5", "v9", "v10"]
    assert newest(["v4.1", "v10", "v9"]) == "v10" and newest([]) is None
    assert all(SCHEMAS[v].source.startswith("gonka-ai/gonka devshard/proto/devshard/v1/diff.proto@") for v in VERSIONS)


def test_host_lists_its_versions_newest_first():
    class Fetcher:
        def get_json(self, path, *a, **k):
            return [{"name": n, "status": "ok"} for n in ("v4.1", "v10", "v5", "v9")]

    assert DevshardHost("gonka1host", Fetcher()).versions() == ["v10", "v9", "v5", "v4.1"]


def test_an_unknown_version_is_an_error_naming_version_escrow_and_host():
    with pytest.raises(UnknownProtocolVersion, match=r"'v7'.*escrow 1971, host http://h") as info:
        schema_for("v7", escrow="1971", host="http://h")
    assert (info.value.version, info.value.escrow, info.value.host) == ("v7", "1971", "http://h")
    with pytest.raises(UnknownProtocolVersion):
        schema_for(None)
    with pytest.raises(UnknownProtocolVersion, match="escrow 1971"):
        decode_entries("1971", "v6", [{"diff": {"nonce": 1, "txs": []}}], False)
    with pytest.raises(UnknownProtocolVersion):
        diff_from_host_json({"diff": {"nonce": 1, "txs": []}}, "")


def test_malformed_tx_on_the_object_path_names_escrow_nonce_and_reason():
    good = diff_to_host_json({"nonce": 41, "txs": [{"heartbeat": {}}]}, "v5", b"s", bytes(32))
    assert diff_messages_from_host_json(good, "v5", "1971")["txs"][0].WhichOneof("tx") == "heartbeat"
    bad = {"diff": {"nonce": 42, "txs": base64.b64encode(encode_diff({"nonce": 42, "txs": []}, "v5")
                                                        + b"\x12\x02\x0a\x05").decode()}}
    with pytest.raises(WireDecodeError, match=r"escrow 1971 diff 42 txs\[0\]: truncated"):
        diff_messages_from_host_json(bad, "v5", "1971")
    with pytest.raises(WireDecodeError, match=r"escrow 1971 diff 42 txs\[0\]"):
        decode_entries("1971", "v5", [bad], False)
    utf8 = SCHEMAS["v5"].encode("DevshardTx", {"start_inference": {"model": "m"}}).replace(b"m", b"\xff")
    with pytest.raises(WireDecodeError, match="in start_inference: field model: invalid UTF-8"):
        diff_messages_from_host_json({"diff": {"nonce": 1, "txs": base64.b64encode(
            encode_diff({"nonce": 1, "txs": []}, "v5") + b"\x12" + bytes([len(utf8)]) + utf8).decode()}}, "v5", "1")


def test_the_poller_decode_refuses_what_the_dict_path_refuses():
    """decode_entries reads entries its own way (indexer.wire.diffs.diff_contents_from_host_json): a bad signature
    or root, a diff of another escrow, a gap in the run are still errors naming the diff and the field."""
    good = diff_to_host_json({"nonce": 5, "txs": [{"heartbeat": {}}]}, "v5", b"sig", bytes(32))
    assert decode_entries("1971", "v5", [good], False).txs == 1
    for field, where in (("user_sig", "diff"), ("post_state_root", "diff"), ("state_hash", None)):
        bad = {"diff": dict(good["diff"]), "state_hash": good["state_hash"]}
        (bad["diff"] if where else bad)[field] = "not base64!"
        with pytest.raises(WireDecodeError, match=rf"escrow 1971 diff 5 {field}: invalid base64"):
            decode_entries("1971", "v5", [bad], False)
        with pytest.raises(WireDecodeError, match=rf"escrow 1971 diff 5 {field}: invalid base64"):
            diff_messages_from_host_json(bad, "v5", "1971")
    other = {"diff": {"nonce": 5, "txs": base64.b64encode(SCHEMAS["v5"].encode(
        "DiffContent", {"nonce": 5, "escrow_id": "1972"})).decode()}}
    with pytest.raises(NormalizeError, match="diff 5 belongs to escrow 1972, not 1971"):
        decode_entries("1971", "v5", [other], False)
    later = diff_to_host_json({"nonce": 7, "txs": []}, "v5", b"sig", bytes(32))
    with pytest.raises(ValueError, match="not contiguous at nonce 7"):
        decode_entries("1971", "v5", [good, later], False)

"""The block typer (indexer/load/typed/_typer.c) against the Python paths: every line of a block, typed in C where it
can be, must give exactly what the Python paths alone give (rows, in line order, quarantine, counts, batch facts)."""
from __future__ import annotations

import json
import random

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from indexer.load.prepare import _prepare, prepare_block
from indexer.load.typed.structs import typed_line
from indexer.load.typed.native import IMPL, TYPER_KINDS, type_block
from indexer.synth import generate

H64 = "ab" * 32
# the tests that call the C block typer itself; the rest compare prepare_block with the Python paths either way
needs_c = pytest.mark.skipif(IMPL != "c", reason="the C block typer is not in use (INDEXER_IMPL or no build)")


def _python(block: bytes, first: int, resume_after: int = 0):
    """The Python paths alone, as prepare_block ran them before the block typer."""
    parts = block.split(b"\n")
    lines = [(first + i, raw) for i, raw in enumerate(parts) if first + i > resume_after]
    prepared = _prepare(5, lines, orjson.loads, typed_line)
    prepared.skipped = sum(1 for i, raw in enumerate(parts) if first + i <= resume_after and raw.strip())
    prepared.last_line = max(prepared.last_line, first + block.count(b"\n", 0, len(block) - 1))
    return prepared


def _facts(p):
    return ({k: (kb.copy, kb.count, kb.scope, kb.slot_max, kb.distinct_keys, kb.key_ranges)
             for k, kb in p.kinds.items()}, p.lines, p.last_line, p.skipped, p.rejects, p.parses, p.escrow_sizes)


def _same(lines: list[bytes], first: int = 1, resume_after: int = 0):
    block = b"\n".join(lines) + b"\n"
    got, want = prepare_block(5, first, block, resume_after), _python(block, first, resume_after)
    assert _facts(got) == _facts(want)
    return got


def _variants(rec: dict) -> list:
    """A record of a typer kind, and ways to write it that are or are not what the C path takes."""
    text = json.dumps(rec, separators=(",", ":"))
    out = [text, json.dumps(rec), json.dumps(dict(reversed(list(rec.items()))))]
    for name, value in rec.items():
        if name == "kind":
            continue
        for bad in (None, 1.0, 1e3, -1, -0.0, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63), "7", "07", "",
                    "ABCDEF", "abcg", "x" * 128, "x" * 129, "é", "a\tb", "a\\\\b", "a:b", True, [1], {"a": 1}):
            out.append(json.dumps({**rec, name: bad}, separators=(",", ":")))
        short = {k: v for k, v in rec.items() if k != name}
        out.append(json.dumps(short, separators=(",", ":")))
    first_field = next(k for k in rec if k != "kind")
    out += [text[:-1] + ',"unknown":1}', text[:-1] + ',"' + first_field + '":1}',
            text.replace('{"kind"', '{"kind":"start","kind"', 1), text + " ", " " + text, text[:-1],
            text.replace(":", " : "), text.replace('"', "'", 2), "-0".join(text.rsplit("0", 1)) if "0" in text else text,
            "[" + text + "]", text.replace("}", ',"note":"x\\u0000y"}')]
    # keys the kind does not know (a newer protocol's scalars, as a v5 Finish's served_hash): kept in extra
    for value in (H64, "", "a:b", "x\x7fy", "é", 0, -5, 2**63 - 1, -(2**63) + 1, 2**63, -(2**63), 2**64, 10**19,
                  True, False, None, 1.5, [1], {"a": 1}):
        out.append(text[:-1] + ',"served_hash":' + json.dumps(value) + "}")
    out += [text[:-1] + ',"served_hash":"' + H64 + '","zz":7,"ok":true}',
            '{"zz":1,' + text[1:], text[:-1] + ',"zz":1,"zz":2}', text[:-1] + ',"zz":1,"zz":1}',
            text[:-1] + ',"a b":"c d"}', text[:-1] + ',"":1}', text[:-1] + ', "zz" : 3 }',
            text[:-1] + ',"zz":-0}', text[:-1] + ',"zz":01}', text[:-1] + ',"zz":1e3}']
    return [line.encode("utf-8", "surrogatepass") for line in out]


def test_every_variant_of_every_kind_types_as_the_python_paths():
    base = [r for r in generate(seed=4, escrows=3, inferences=30, epochs=1) if r["kind"] in TYPER_KINDS]
    seen = set()
    picked = []
    for rec in base:
        if rec["kind"] not in seen:
            seen.add(rec["kind"])
            picked.append(rec)
    picked.append({"kind": "finish", "escrow_id": "9", "inference_id": 1, "diff_nonce": 2, "executor_slot": 0,
                   "input_tokens": 0, "output_tokens": 0, "response_hash": H64, "response_payload": "{\"events\":[]}"})
    picked.append({"kind": "finish", "escrow_id": "9", "inference_id": 2, "diff_nonce": 3, "executor_slot": 0,
                   "input_tokens": 0, "output_tokens": 0, "response_hash": H64, "response_payload": ""})
    assert seen == TYPER_KINDS
    lines = [line for rec in picked for line in _variants(rec)]
    got = _same(lines + [b"", b"   ", b"{broken"], first=100)
    assert got.rejects and sum(kb.count for kb in got.kinds.values()) > 100


def test_repeated_keys_and_ranges_across_c_and_python_rows():
    start = {"kind": "start", "escrow_id": "e1", "inference_id": 5, "diff_nonce": 1, "prompt_hash": H64}
    lines = [json.dumps({**start, "inference_id": i, "diff_nonce": i}).encode() for i in (5, 9, 3)]
    lines.append(json.dumps({**start, "inference_id": 11, "model": "é"}).encode())  # a Python row, same escrow
    lines.append(json.dumps({**start, "escrow_id": "e2", "inference_id": 2}).encode())
    got = _same(lines)
    assert got.kinds["start"].key_ranges == {"e1": (3, 11), "e2": (2, 2)}
    assert got.kinds["start"].distinct_keys
    again = _same(lines + [lines[3]])  # the Python row's key twice
    assert not again.kinds["start"].distinct_keys
    twice = _same(lines + [lines[0]])  # a C row's key twice
    assert not twice.kinds["start"].distinct_keys


def test_resume_and_blank_lines_are_counted_as_before():
    lines = [json.dumps(r, separators=(",", ":")).encode() for r in generate(seed=2, escrows=1, inferences=5,
                                                                            epochs=1)]
    lines[3:3] = [b"", b"  \t"]
    for resume in (0, 1, 4, 7, len(lines)):
        got = _same(lines, first=1, resume_after=resume)
        assert got.skipped == sum(1 for i, raw in enumerate(lines, 1) if i <= resume and raw.strip())


@needs_c
def test_a_fallback_row_of_an_unknown_kind_is_an_error():
    with pytest.raises(ValueError):
        type_block(b'{"x":1}\n', 1, 0, b"1", lambda n, raw: ("nope", "1\n", ("a", 1), None))


_KEYS = ["kind", "escrow_id", "inference_id", "diff_nonce", "prompt_hash", "model", "input_length", "max_tokens",
         "started_at", "confirmed_at", "executor_slot", "input_tokens", "output_tokens", "response_hash",
         "response_payload", "validator_slot", "voter_slot", "valid", "vote_valid", "tx_index", "protocol_version",
         "served_hash", "zz"]  # the last two: keys no kind knows (kept in extra)
_VALUES = st.one_of(st.sampled_from(sorted(TYPER_KINDS)), st.integers(-(2**64), 2**64), st.booleans(), st.none(),
                    st.text(max_size=5), st.sampled_from([H64, H64.upper(), "0", "12", "x" * 129]),
                    st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(_KEYS), _VALUES, min_size=1, max_size=12), min_size=1, max_size=8),
       st.randoms())
def test_random_records_type_as_the_python_paths(records, rnd: random.Random):
    lines = []
    for rec in records:
        rec.setdefault("kind", rnd.choice(sorted(TYPER_KINDS)))
        lines.append(json.dumps(rec, separators=rnd.choice([(",", ":"), (", ", ": ")])).encode())
    _same(lines)


@needs_c
def test_a_newer_protocols_scalar_fields_are_typed_in_c_into_extra():
    """A v5+ Finish carries served_hash, which no column holds: such lines stay on the C path (the poller's decoded
    runs and a mainnet file are mostly these) and their unknown members land in extra exactly as the Python paths
    write them; an unknown value C cannot write back exactly (beyond 64 bits, a float, null, nested) is declined."""
    fin = {"kind": "finish", "escrow_id": "9", "inference_id": 1, "diff_nonce": 2, "executor_slot": 0,
           "input_tokens": 10, "output_tokens": 3, "response_hash": H64, "tx_index": 1, "protocol_version": "v5"}
    taken = [{**fin, "inference_id": i, "served_hash": H64, "zz": i - 3, "ok": i % 2 == 0} for i in range(1, 6)]
    declined = [{**fin, "inference_id": 10, "zz": 2**63}, {**fin, "inference_id": 11, "zz": 1.5},
                {**fin, "inference_id": 12, "zz": None}, {**fin, "inference_id": 13, "zz": [1]}]
    lines = [json.dumps(r, separators=(",", ":")).encode() for r in taken + declined]
    handed = []

    def fallback(number, raw):
        handed.append(number)
        return True

    count, _, _, typed = type_block(b"\n".join(lines) + b"\n", 1, 0, b"5", fallback)
    assert handed == [6, 7, 8, 9] and count == 9
    (kind, copy, n, *_), = typed
    assert kind == "finish" and n == 5
    first = copy.split(b"\n")[0].split(b"\t")
    assert first[-2] == b'{"served_hash":"%s","zz":-2,"ok":false}' % H64.encode()
    _same(lines)

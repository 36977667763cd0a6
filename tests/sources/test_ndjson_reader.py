"""Property tests of the NDJSON reader: line classification and plain/gzip line streaming (no database)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from indexer.records import KINDS
from indexer.sources import ndjson
from indexer.sources.ndjson import (Accepted, LongLine, Rejected, block_lines, classify_line, key_count,
                                     open_input)

# JSON values json.dumps can write and json.loads reads back. Text never holds NUL: PostgreSQL jsonb cannot store
# it, so a record with one is quarantined by design (tested separately below).
_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20)
_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
                     max_leaves=12)
_known_record = st.builds(lambda kind, rest: {**rest, "kind": kind},
                          st.sampled_from(sorted(KINDS)), st.dictionaries(_text, _json, max_size=6))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
@example(b"")
@example(b"\xff\xfe{\x00}\x00")
@example(b"[" * 5000)
@example(b'{"kind":"epoch","epoch_index":1}\xff')
@example('{"kind":"epoch","epoch_index":1}'.encode("utf-16"))
@example(b'{"kind":"epoch","epoch_index":NaN}')
@example(b'{"kind":"epoch","x":"\\ud800"}')
def test_classify_never_raises_on_arbitrary_bytes(raw):
    verdict = classify_line(raw)
    assert isinstance(verdict, (Accepted, Rejected))
    if isinstance(verdict, Rejected):
        assert isinstance(verdict.reason, str) and verdict.reason
    else:
        assert verdict.kind in KINDS


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_known_record, st.booleans())
@example({"kind": "finish", "response_payload": "literal \\u0000 text, escaped in JSON"}, True)
@example({"kind": "finish", "response_payload": "quote \" backslash \\ newline \n tab \t é 😀"}, True)
@example({"kind": "host_stats", "cost": 18446744073709551615}, True)
@example({"kind": "escrow", "big": 10 ** 30}, False)
def test_any_object_with_a_known_kind_is_accepted(record, ascii_only):
    raw = json.dumps(record, ensure_ascii=ascii_only).encode()
    verdict = classify_line(raw)
    assert isinstance(verdict, Accepted), verdict
    assert verdict.kind == record["kind"]


@settings(max_examples=200)
@given(_json.filter(lambda v: not isinstance(v, dict)))
def test_anything_not_a_json_object_is_rejected_with_a_reason(value):
    verdict = classify_line(json.dumps(value).encode())
    assert isinstance(verdict, Rejected)
    assert "not a JSON object" in verdict.reason


@settings(max_examples=200)
@given(st.dictionaries(_text, _json, max_size=5).filter(lambda d: "kind" not in d))
def test_object_without_kind_is_rejected_naming_kind(record):
    verdict = classify_line(json.dumps(record).encode())
    assert isinstance(verdict, Rejected) and "kind" in verdict.reason


@settings(max_examples=200)
@given(_text.filter(lambda k: k not in KINDS), st.dictionaries(_text, _json, max_size=3))
def test_unknown_kind_is_rejected_and_named(kind, rest):
    verdict = classify_line(json.dumps({**rest, "kind": kind}).encode())
    assert isinstance(verdict, Rejected)
    assert "unknown kind" in verdict.reason and verdict.kind == kind[:60]


@given(st.sampled_from(sorted(KINDS)), _text, _text)
def test_nul_character_is_rejected_not_accepted(kind, before, after):
    raw = json.dumps({"kind": kind, "s": before + "\x00" + after}).encode()
    verdict = classify_line(raw)
    assert isinstance(verdict, Rejected) and "\\u0000" in verdict.reason


@given(st.sampled_from([b"{", b'{"kind": "epoch"', b"{'kind': 'epoch'}", b'{"kind": epoch}', b"nul\x00l"]))
def test_malformed_json_is_rejected_as_malformed(raw):
    verdict = classify_line(raw)
    assert isinstance(verdict, Rejected) and "malformed JSON" in verdict.reason


@given(_json)
def test_key_count_counts_every_key_of_every_object(value):
    # counted independently: the object hook sees each object's pairs once, nested ones included (the fast path
    # and duplicate_key compare this count with a line's colons)
    pairs = []
    json.loads(json.dumps(value), object_pairs_hook=lambda p: pairs.append(len(p)) or dict(p))
    assert key_count(value) == sum(pairs)


class _Pairs(list):
    """An object written with its pairs as given, repeated keys included (json.dumps cannot write those)."""


_colon_text = st.text(st.sampled_from(["a", ":", "\\", '"', "\u00e9", "\n", "b"]), max_size=6)
_colon_json = st.recursive(st.none() | st.integers() | _colon_text,
                           lambda inner: st.lists(inner, max_size=3) | st.lists(st.tuples(_colon_text, inner),
                                                                                   max_size=4).map(_Pairs),
                           max_leaves=10)


def _write(value, how: str) -> str:
    """JSON text of ``value``; ``how``: "utf8", "ascii" (non-ASCII as \\u escapes), or "colons" (every colon inside
    a string as \\u003a, which the line then does not show as a colon)."""
    if isinstance(value, _Pairs):
        return "{" + ",".join(_write(k, how) + ":" + _write(v, how) for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_write(v, how) for v in value) + "]"
    text = json.dumps(value, ensure_ascii=how == "ascii")
    return text.replace(":", "\\u003a") if how == "colons" else text


def _first_repeat(raw: bytes) -> str | None:
    """The reference: the stdlib's parse with a hook that sees every object's pairs."""
    found = []

    def hook(pairs):
        keys = [k for k, _ in pairs]
        repeats = [k for i, k in enumerate(keys) if k in keys[:i]]
        if repeats and not found:
            found.append(repeats[0])
        return dict(pairs)
    json.loads(raw, object_pairs_hook=hook)
    return found[0] if found else None


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_colon_text, _colon_json), min_size=1, max_size=5).map(_Pairs),
       st.sampled_from(["utf8", "ascii", "colons"]))
def test_duplicate_key_is_found_whatever_the_strings_hold(pairs, how):
    # colons inside keys and values, escapes (\u00e9 written as an escape or as UTF-8): the count of the strings'
    # colons lets most lines skip the second parse, never one that repeats a key
    from indexer.sources.ndjson import duplicate_key
    import orjson
    raw = _write(pairs, how).encode()
    assert (duplicate_key(raw, orjson.loads(raw)) is None) == (_first_repeat(raw) is None)


# -- InputFile.open_blocks + block_lines -----------------------------------------------------------------------------------------

# Lines are text (UTF-8) without newlines; they may hold a stray CR, spaces or be empty.
_line = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=30) | \
    st.sampled_from(["", " ", "\t", "\r", " \r", '{"kind":"epoch","epoch_index":1}'])


def _expected(lines: list[str]) -> list[tuple[int, bytes]]:
    out = []
    for number, line in enumerate(lines, start=1):
        raw = line.encode().rstrip(b"\r\n")
        if raw.strip():
            out.append((number, raw))
    return out


def _read(path: Path, per_block: int = 3, **kw) -> list[tuple[int, bytes]]:
    inp = open_input(str(path))
    try:
        return [pair for first, block in inp.open_blocks(per_block, **kw) for pair in block_lines(first, block)]
    finally:
        inp.cleanup()


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_line, max_size=25), st.sampled_from(["\n", "\r\n"]), st.booleans())
@example(["a", "", "  ", "b"], "\r\n", True)
@example(["", "", "x"], "\n", False)
def test_plain_and_gzip_give_the_same_numbered_lines(tmp_path, lines, newline, final_newline):
    data = newline.join(lines) + (newline if final_newline and lines else "")
    plain, packed = tmp_path / "in.ndjson", tmp_path / "in.ndjson.gz"
    plain.write_bytes(data.encode())
    packed.write_bytes(gzip.compress(data.encode()))
    got_plain, got_gz = _read(plain), _read(packed)
    assert got_plain == got_gz
    assert got_plain == _expected(lines)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_line, max_size=40), st.sampled_from(["\n", "\r\n"]), st.booleans(), st.integers(1, 7),
       st.booleans())
@example(["a", "b", "c", "d"], "\n", True, 2, False)
@example(["a", "b", "c", "d"], "\n", False, 2, True)
def test_blocks_hold_the_same_numbered_lines(tmp_path, lines, newline, final_newline, per_block, packed):
    """open_blocks + block_lines number the lines alike whatever the block size, and every block but the last
    holds exactly per_block physical lines."""
    data = (newline.join(lines) + (newline if final_newline and lines else "")).encode()
    path = tmp_path / "in.ndjson"
    path.write_bytes(gzip.compress(data) if packed else data)
    inp = open_input(str(path))
    blocks = list(inp.open_blocks(per_block))
    assert [first for first, _ in blocks] == [1 + i * per_block for i in range(len(blocks))]
    assert all(block.count(b"\n") == per_block for _, block in blocks[:-1])
    assert b"".join(block for _, block in blocks) == data
    assert [pair for first, block in blocks for pair in block_lines(first, block)] == _expected(lines)


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_line, max_size=40), st.booleans(), st.integers(1, 9), st.integers(1, 40), st.integers(1, 16))
@example(["x" * 50, "y", "z" * 30], True, 9, 10, 4)  # lines longer than both the cap and a read
def test_long_lines_cut_blocks_by_size(tmp_path, lines, final_newline, per_block, max_bytes, chunk_bytes):
    """With a byte cap, blocks still hold whole lines numbered from the file's first line, never more than
    per_block of them, and none grows past the cap by more than the read that crossed it and the line it ends."""
    data = ("\n".join(lines) + ("\n" if final_newline and lines else "")).encode()
    path = tmp_path / "in.ndjson"
    path.write_bytes(data)
    blocks = list(open_input(str(path)).open_blocks(per_block, max_bytes=max_bytes, chunk_bytes=chunk_bytes))
    assert b"".join(block for _, block in blocks) == data
    assert all(block.endswith(b"\n") and 0 < block.count(b"\n") <= per_block for _, block in blocks[:-1])
    longest = max((len(line) + 1 for line in data.split(b"\n")), default=0)
    assert all(len(block) < max_bytes + chunk_bytes + longest for _, block in blocks)
    numbers = [first for first, _ in blocks]
    assert numbers == [1 + sum(block.count(b"\n") for _, block in blocks[:i]) for i in range(len(blocks))]
    assert [pair for first, block in blocks for pair in block_lines(first, block)] == _expected(lines)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_line, max_size=60), st.integers(1, 9), st.integers(1, 16), st.integers(1, 16))
def test_ramped_blocks_double_up_to_the_block_size(tmp_path, lines, ramp_from, per_block, chunk_bytes):
    """open_blocks(ramp_from=n): blocks of n, 2n, 4n ... lines up to per_block, the same numbered lines."""
    data = ("\n".join(lines) + "\n").encode() if lines else b""
    path = tmp_path / "in.ndjson"
    path.write_bytes(data)
    blocks = list(open_input(str(path)).open_blocks(per_block, ramp_from=ramp_from, chunk_bytes=chunk_bytes))
    sizes, want = [], min(ramp_from, per_block)
    for _ in blocks[:-1]:
        sizes.append(want)
        want = min(want * 2, per_block)
    assert [block.count(b"\n") for _, block in blocks[:-1]] == sizes
    assert b"".join(block for _, block in blocks) == data
    assert [pair for first, block in blocks for pair in block_lines(first, block)] == _expected(lines)


def test_line_numbers_count_blank_lines_and_crlf_is_stripped(tmp_path):
    path = tmp_path / "f.ndjson"
    path.write_bytes(b'{"a":1}\r\n\r\n   \n{"b":2}\r\n\n{"c":3}')
    assert _read(path) == [(1, b'{"a":1}'), (4, b'{"b":2}'), (6, b'{"c":3}')]


def test_a_byte_order_mark_before_the_first_line_is_ignored_and_one_inside_is_not(tmp_path):
    # RFC 8259 §8.1: a parser may ignore a BOM; editors on Windows write one. Inside the file it stays the line's.
    bom = b"\xef\xbb\xbf"
    body = b'{"a":1}\n' + bom + b'{"b":2}\n'
    for name, data in (("f.ndjson", bom + body), ("f.ndjson.gz", gzip.compress(bom + body))):
        (tmp_path / name).write_bytes(data)
        assert _read(tmp_path / name) == [(1, b'{"a":1}'), (2, bom + b'{"b":2}')]
    assert isinstance(classify_line(bom + b'{"b":2}'), Rejected)


def test_gzip_is_detected_by_magic_not_by_name(tmp_path):
    disguised = tmp_path / "plain-name.ndjson"
    disguised.write_bytes(gzip.compress(b'{"x":1}\n\n{"y":2}\n'))
    assert _read(disguised) == [(1, b'{"x":1}'), (3, b'{"y":2}')]


def test_read_ahead_keeps_order_raises_in_place_and_stops_its_reader():
    import threading

    import pytest

    from indexer.sources.ndjson import InputError, read_ahead

    assert list(read_ahead(iter([(1, b"a"), (2, b"b"), (3, b"c")]), depth=1)) == [(1, b"a"), (2, b"b"), (3, b"c")]

    def broken():
        yield 1, b"a\n"
        yield 2, b"b\n"
        raise InputError("x.ndjson.gz: corrupt gzip data near line 3")

    got = []
    with pytest.raises(InputError, match="near line 3"):
        for item in read_ahead(broken()):
            got.append(item)
    assert got == [(1, b"a\n"), (2, b"b\n")]  # every block before the bad spot first

    closed = threading.Event()

    def endless():
        try:
            n = 0
            while True:
                n += 1
                yield n, b"x\n"
        finally:
            closed.set()

    stream = read_ahead(endless(), depth=2)
    assert next(stream) == (1, b"x\n")
    stream.close()  # the consumer stops early: the reader thread ends and the source is closed
    assert closed.is_set()
    assert not [t for t in threading.enumerate() if t.name == "block-reader"]


def _close_and_exit(stream) -> None:
    stream.close()


def test_a_read_ahead_inherited_by_a_forked_child_closes_there_without_waiting_for_a_reader():
    """A worker forked while a load's read-ahead was still open (left to the garbage collector) finalized its copy,
    whose reader thread does not exist in the child: the child waited for that thread's end marker for ever."""
    import multiprocessing

    from indexer.sources.ndjson import read_ahead

    stream = read_ahead(iter([(n, b"x\n") for n in range(1, 10)]), depth=1)
    assert next(stream) == (1, b"x\n")  # the reader now waits to put the next blocks
    child = multiprocessing.get_context("fork").Process(target=_close_and_exit, args=(stream,))
    child.start()
    child.join(timeout=60)  # the timeout only turns the old hang into a failure
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0
    assert list(stream) == [(n, b"x\n") for n in range(2, 10)]  # the parent's copy is untouched


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["", "a", '{"kind":"epoch","epoch_index":1}'])
                | st.integers(1, 300).map(lambda n: "x" * n), max_size=30),
       st.booleans(), st.integers(1, 9), st.integers(4, 40), st.integers(1, 16), st.integers(4, 60))
@example(["a", "x" * 200, "b"], False, 3, 8, 4, 10)  # a long line last, without a newline
def test_a_line_past_the_limit_is_read_past_not_held(tmp_path, lines, final_newline, per_block, max_bytes,
                                                     chunk_bytes, limit):
    """A line longer than MAX_LINE_BYTES (by more than a read) comes out as a LongLine (its number, length and first
    bytes) in place of a block, never held whole; every other line keeps its number; no block holds more than the
    limit, the cap and a read."""
    import pytest

    with pytest.MonkeyPatch.context() as m:
        m.setattr(ndjson, "MAX_LINE_BYTES", limit)
        m.setattr(ndjson, "LONG_LINE_KEPT", 6)
        data = ("\n".join(lines) + ("\n" if final_newline and lines else "")).encode()
        path = tmp_path / "in.ndjson"
        path.write_bytes(data)
        items = list(open_input(str(path)).open_blocks(per_block, max_bytes=max_bytes, chunk_bytes=chunk_bytes))
    bound = limit + chunk_bytes
    got = []
    for first, item in items:
        if isinstance(item, LongLine):
            assert item.line == first
            got.append((first, item))
        else:
            assert len(item) <= limit + max_bytes + 2 * chunk_bytes
            got.extend(block_lines(first, item))
    numbered = dict(got)
    for number, line in enumerate(lines, start=1):
        raw = line.encode()
        if len(raw) > bound:
            assert numbered[number] == LongLine(number, len(raw), raw[:6])
        elif len(raw) <= limit and raw.strip():
            assert numbered[number] == raw
        elif not raw.strip():
            assert number not in numbered
    assert sorted(numbered) == [n for n, line in enumerate(lines, start=1) if line.strip()]

"""The two implementations of the load's typing: the C block typer (indexer/load/typed/_typer.c) and the Python
paths alone. INDEXER_IMPL chooses (auto, c, python), ``IMPL`` says which a process uses, and both give the same typed
output (rows, quarantine, counts, batch facts) for the same lines."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from indexer.load.typed import native
from indexer.load.prepare import prepare_block, prepare_block_python
from indexer.synth import generate

needs_c = pytest.mark.skipif(native.IMPL != "c", reason="the C block typer is not in use (INDEXER_IMPL or no build)")


def _no_extension():
    raise ImportError("No module named 'indexer.load.typed._typer'")


def test_the_choice_of_implementation():
    assert native.choose("python") is None
    assert native.choose("auto", load=_no_extension) is None  # a build without a compiler: the Python paths
    assert native.choose("", load=_no_extension) is None
    assert native.choose(" C ", load=lambda: sys) is sys
    with pytest.raises(ImportError, match="INDEXER_IMPL=c but the C block typer .* not built"):
        native.choose("c", load=_no_extension)
    with pytest.raises(ValueError, match="INDEXER_IMPL='rust': expected one of auto, c, python"):
        native.choose("rust")


def _impl_in_a_new_process(value: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "INDEXER_IMPL": value}
    return subprocess.run([sys.executable, "-c", "from indexer.load.typed import IMPL; print(IMPL)"],
                          capture_output=True, text=True, env=env, timeout=120)


def test_the_environment_switch_is_read_when_the_typer_is_imported():
    forced = _impl_in_a_new_process("python")
    assert forced.returncode == 0 and forced.stdout.strip() == "python", forced.stderr[-2000:]
    wrong = _impl_in_a_new_process("fast")
    assert wrong.returncode != 0
    assert "INDEXER_IMPL='fast': expected one of auto, c, python" in wrong.stderr.splitlines()[-1]


@needs_c
def test_c_is_used_when_built_and_asked_for():
    assert _impl_in_a_new_process("c").stdout.strip() == "c"
    assert _impl_in_a_new_process("auto").stdout.strip() == "c"


# ---- the same output from both ---------------------------------------------------------------------------------

_RECORDS = [r for r in generate(seed=11, escrows=2, inferences=12, epochs=1)]
_BENT = st.one_of(st.none(), st.integers(-(2**64), 2**64), st.booleans(), st.text(max_size=4),
                  st.sampled_from(["ab" * 32, "AB" * 32, "0", "07", "a\tb", "é", "x" * 129, "a\\b",
                                   "m" * 257, "é" * 200, "f" * 513]),
                  st.floats(allow_nan=False, allow_infinity=False), st.just([1]), st.just({"a": 1}))


def _facts(p):
    return ({k: (kb.copy, kb.count, kb.scope, kb.slot_max, kb.distinct_keys, kb.key_ranges)
             for k, kb in sorted(p.kinds.items())}, p.lines, p.last_line, p.skipped, p.rejects, p.parses,
            p.escrow_sizes)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_RECORDS) - 1), st.integers(0, 3), st.text(min_size=1, max_size=14),
                          _BENT), min_size=1, max_size=30),
       st.integers(1, 10**9), st.integers(0, 5), st.randoms())
def test_both_implementations_type_record_lines_the_same(picks, first, resume, rnd: random.Random):
    """Lines of every kind from a synthetic log, some bent (a field changed, dropped or added; blank lines; spacing),
    typed as one block by prepare_block and by the Python paths alone."""
    lines = []
    for at, how, name, value in picks:
        rec = dict(_RECORDS[at])
        field = rnd.choice(sorted(rec))
        if how == 1 and field != "kind":
            rec[field] = value
        elif how == 2:
            rec.pop(field)
        elif how == 3:
            rec[name] = value
        lines.append(b"" if how == 0 and rnd.random() < 0.2 else
                     json.dumps(rec, separators=rnd.choice([(",", ":"), (", ", ": ")])).encode())
    block = b"\n".join(lines) + b"\n"
    resume_after = first + resume - 1 if resume else 0
    assert _facts(prepare_block(5, first, block, resume_after)) == \
        _facts(prepare_block_python(5, first, block, resume_after))


@st.composite
def _placeholder_rows(draw):
    rows = draw(st.lists(st.tuples(st.integers(0, 10**12),
                                   st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"\\n"))), max_size=12))
    return b"".join(b"%d\t%s\t0\n" % row for row in rows)


@needs_c
@given(_placeholder_rows(), st.integers(0, 10**12), st.sampled_from([b"0", b"7", b"123456789012"]))
def test_both_shifts_renumber_rows_the_same(copy, offset, sid):
    assert native.shift_rows_python(copy, offset, sid) == native._typer.shift_rows(copy, offset, sid)


_NOT_ROWS = [b"1\tabc\t5\n", b"x\tabc\t0\n", b"1\tabc\t0", b"\t0\n", b"12345678901234567890\ta\t0\n", b"1\t0\n2\t0",
             b"7\n", b"1\t\n"]


@pytest.mark.parametrize("bad", _NOT_ROWS)
def test_the_python_shift_refuses_what_c_refuses(bad):
    with pytest.raises(ValueError, match="not a placeholder row at byte") as python:
        native.shift_rows_python(bad, 1, b"9")
    if native.IMPL == "c":
        with pytest.raises(ValueError, match="not a placeholder row at byte") as c:
            native._typer.shift_rows(bad, 1, b"9")
        assert str(c.value) == str(python.value)


def test_the_shortest_placeholder_row_has_no_columns():
    assert native.shift_rows_python(b"1\t0\n", 4, b"9") == b"5\t9\n"
    if native.IMPL == "c":
        assert native._typer.shift_rows(b"1\t0\n", 4, b"9") == b"5\t9\n"

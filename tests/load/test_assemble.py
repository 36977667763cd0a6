"""The poller's typing split (indexer.load.assemble): runs typed by decode workers with a placeholder source and
part-relative line numbers, refusals typed apart, a few lines typed at the end, must give exactly the batch that
typing the whole source in one piece gives: the same COPY text, counts, scopes, slots, key verdicts, rejects and
refusal parses."""
from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from indexer.devnet import Scenario, ScenarioConfig
from indexer.load.assemble import PLACEHOLDER_SOURCE, _shift, assemble
from indexer.load.prepare import prepare_batch
from indexer.poller.decode import decode_entries
from indexer.wire.diffs import diff_to_host_json
from indexer.wire.normalize import dumps_record_bytes


def _as_dict(prep):
    """Everything the commit uses. Row order is not part of it: the loader orders by line where order matters
    (the last line of a repeated key wins)."""
    return {"kinds": {k: (sorted(kb.copy.split(b"\n")), kb.count, kb.scope, kb.slot_max, kb.distinct_keys,
                          kb.key_ranges)
                      for k, kb in prep.kinds.items()},
            "rejects": sorted(prep.rejects), "parses": sorted(prep.parses), "sizes": prep.escrow_sizes,
            "lines": prep.lines}


def _source(runs_per_escrow: int = 2):
    """A poller-like source: for each escrow its record (untyped), its log in runs (typed by 'workers'), the
    refusals of each run filled with a payload and typed apart, then a host-stats line (untyped)."""
    scn = Scenario(ScenarioConfig(seed=2078, epochs=1, escrows_per_epoch=3, inferences_per_escrow=60))
    version = scn.config.protocol_version
    lines, parts, untyped = [], [], []
    for eid, esc in scn.escrows.items():
        untyped.append(len(lines))
        lines.append(dumps_record_bytes({"kind": "escrow", "escrow_id": eid, "epoch_index": 1, "model_id": "m",
                                         "slots": ["a", "b", "c", "d"]}))
        entries = [diff_to_host_json(d, version, sig, root) for d, sig, root in scn.host_diff_log(esc)]
        step = max(1, len(entries) // runs_per_escrow)
        for i in range(0, len(entries), step):
            dec = decode_entries(eid, version, entries[i:i + step], True)
            run = dec.lines()
            for pos, rec in dec.held:
                rec["response_payload"] = orjson.dumps({"object": "error", "message": (
                    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                    "(4000 in the messages, 1000 in the completion)."), "code": 400}).decode()
                run[pos] = dumps_record_bytes(rec)
            held = prepare_batch(PLACEHOLDER_SOURCE, [(pos + 1, run[pos]) for pos, _ in dec.held])
            parts += [(len(lines), dec.typed), (len(lines), held)]
            lines += run
        untyped.append(len(lines))
        lines.append(dumps_record_bytes({"kind": "host_stats", "escrow_id": eid, "slot_id": 3, "missed": -1}))
        # a record a worker refuses (quarantined with the source's id and line)
        bad = dumps_record_bytes({"kind": "timeout", "escrow_id": eid, "inference_id": 1, "diff_nonce": 1,
                                  "reason": "later", "votes": []})
        parts.append((len(lines), prepare_batch(PLACEHOLDER_SOURCE, [(1, bad)])))
        lines.append(bad)
    return lines, parts, untyped


def test_assembled_parts_equal_typing_the_source_whole():
    lines, parts, untyped = _source()
    whole = prepare_batch(42, list(enumerate(lines, start=1)))
    got = assemble(42, lines, parts, untyped)
    assert whole.parses and len(whole.rejects) == 6  # refusals parsed; a bad stats line and a bad timeout each
    assert _as_dict(got) == _as_dict(whole)


def test_repeated_keys_across_parts_of_one_escrow_are_found():
    """Two runs of one escrow both carrying a key (an amended tx re-served): scopes overlap, so the keys are
    counted, and the batch goes to the upsert like the whole-source typing says."""
    lines, parts, untyped = _source()
    lines = lines + lines[1:3]  # the first escrow's first records again, as a later part
    parts = parts + [(len(lines) - 2, prepare_batch(PLACEHOLDER_SOURCE, [(1, lines[-2]), (2, lines[-1])]))]
    whole = prepare_batch(42, list(enumerate(lines, start=1)))
    got = assemble(42, lines, parts, untyped)
    assert any(not kb.distinct_keys for kb in whole.kinds.values())
    assert _as_dict(got) == _as_dict(whole)


@given(st.lists(st.tuples(st.integers(1, 10**12), st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"\\n"))),
                max_size=20),
       st.integers(0, 10**12), st.sampled_from([b"0", b"7", b"123456789012"]))
def test_rows_are_renumbered_and_given_their_source(rows, offset, sid):
    """The C shift (indexer.load.typed.shift_rows) against the rows written out by hand: every column kept byte for
    byte (escapes, tabs between columns, empty ones), only the line number and the placeholder id change."""
    copy = b"".join(b"%d\t%s\t0\n" % (n, cols) for n, cols in rows)
    assert _shift(copy, offset, sid) == b"".join(b"%d\t%s\t%s\n" % (n + offset, cols, sid) for n, cols in rows)


def test_a_row_without_the_placeholder_is_refused():
    for bad in (b"1\tabc\t5\n", b"x\tabc\t0\n", b"1\tabc\t0", b"\t0\n", b"12345678901234567890\ta\t0\n"):
        with pytest.raises(ValueError, match="not a placeholder row"):
            _shift(bad, 1, b"9")

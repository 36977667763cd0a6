"""Every value a file or a peer gives is bounded (indexer.records.BOUNDS): a longer string or a longer array
quarantines its line with the field, its length and the bound, by every typing path alike; the other lines load."""
from __future__ import annotations

import json

import pytest

from indexer.load.prepare import prepare_block, prepare_block_python
from indexer.load.typed import native
from indexer.records import ADDRESS_LEN, ARGS, HEX_LEN, MAX_SLOTS, NAME_LEN, URL_LEN
from tests.support.helpers import escrow, ingest_expecting_quarantine, tx

H = "ab" * 32


def _start(inference_id: int, **over) -> dict:
    return {**tx("start", inference_id, inference_id, prompt_hash=H, input_length=10, max_tokens=5), **over}


def _j(obj) -> bytes:
    return json.dumps(obj).encode()


LINES = [
    (_j(escrow()), None),
    (_j(_start(100)), None),
    (_j(_start(101, model="m" * (NAME_LEN + 1))), ("field model", f"{NAME_LEN + 1} characters", f"{NAME_LEN}")),
    (_j(_start(102, model="é" * NAME_LEN)), None),  # characters, not bytes
    (_j(_start(103, prompt_hash="a" * (HEX_LEN + 2))), ("field prompt_hash", "characters")),
    (_j(escrow("7", slots=["gonka1h"] * (MAX_SLOTS + 1))), ("field slots", f"{MAX_SLOTS + 1} entries")),
    (_j(escrow("8", slots=["gonka1h", "g" * (ADDRESS_LEN + 1)])), ("field slots[1]", "characters")),
    (_j(escrow("9", model_id="x" * 10_000)), ("field model_id", "10000 characters")),
    (_j(tx("timeout", 104, 104, reason="refused", votes=[{"voter_slot": 0, "accept": True}] * (MAX_SLOTS + 1))),
     ("field votes", "entries")),
    (_j({"kind": "model_snapshot", "epoch_index": 408, "model_id": "m", "model_args": ["--x"] * (ARGS + 1)}),
     ("field model_args", "entries")),
    (_j({"kind": "participant_epoch", "epoch_index": 408, "participant": "p" * (ADDRESS_LEN + 1)}),
     ("field participant",)),
    (_j({"kind": "signed_diff", "escrow_id": "1971", "nonce": 1, "content": "AA==",
         "source_host": "https://h/" + "a" * URL_LEN}), ("field source_host",)),
    (_j(_start(105, protocol_version="v" * (NAME_LEN + 1))), ("field protocol_version",)),
    (_j(_start(106)), None),
]


def test_values_past_their_bound_are_quarantined_naming_field_and_length(db_url, conn, tmp_path):
    want = {n: frags for n, (_, frags) in enumerate(LINES, start=1) if frags}
    ingest_expecting_quarantine(db_url, tmp_path / "in.ndjson", conn, [line for line, _ in LINES], want)
    assert conn.execute("SELECT array_agg(inference_id ORDER BY 1) FROM rec.start_tx").fetchone()[0] == [100, 102, 106]
    reasons = [r for (r,) in conn.execute("SELECT reason FROM api.quarantine")]
    assert all("\n" not in r and len(r) < 400 for r in reasons)  # one line, not the value itself


@pytest.mark.skipif(native.IMPL != "c", reason="the C block typer is not in use")
def test_the_c_typer_declines_what_the_python_paths_bound():
    block = b"\n".join(line for line, _ in LINES) + b"\n"
    c, py = prepare_block(5, 1, block), prepare_block_python(5, 1, block)
    assert [r[:4] for r in c.rejects] == [r[:4] for r in py.rejects]
    assert {k: kb.copy for k, kb in c.kinds.items()} == {k: kb.copy for k, kb in py.kinds.items()}

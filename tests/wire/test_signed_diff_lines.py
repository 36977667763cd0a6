"""signed_diff lines of the poller's decode: the served DiffContent string kept as it came, the signed root read from
the content's own field 4, and the line equal byte for byte to the record the dict path builds."""
from __future__ import annotations

import base64

import orjson
import pytest

from indexer.poller.decode import decode_entries
from indexer.wire import SCHEMAS, WireDecodeError
from indexer.wire.diffs import signed_diff_record
from indexer.wire.normalize import dumps_record_bytes


def _entry(nonce: int, root: bytes = b"", user_sig: bytes = b"\x01" * 65, unsigned_root: bytes = b"") -> dict:
    content = SCHEMAS["v4.1"].encode("DiffContent", {"nonce": nonce, "txs": [{"finalize_round": {}}],
                                                     "escrow_id": "1971", "post_state_root": root})
    diff = {"nonce": nonce, "txs": base64.b64encode(content).decode(), "user_sig": base64.b64encode(user_sig).decode()}
    if unsigned_root:
        diff["post_state_root"] = base64.b64encode(unsigned_root).decode()
    return {"diff": diff, "state_hash": base64.b64encode(b"\x0b" * 32).decode()}


def test_a_signed_diff_line_keeps_the_served_content_and_the_signed_root():
    entries = [_entry(1, root=b"\xaa" * 32, unsigned_root=b"\xcc" * 32), _entry(2),
               _entry(3, unsigned_root=b"\xdd" * 32)]
    lines = decode_entries("1971", "v4.1", entries, False, "gonka1hostA").lines()
    signed = [orjson.loads(line) for line in lines if b'"signed_diff"' in line]
    assert [s["nonce"] for s in signed] == [1, 2, 3]
    assert signed[0] == {"kind": "signed_diff", "escrow_id": "1971", "nonce": 1, "content": entries[0]["diff"]["txs"],
                         "user_sig": "01" * 65, "post_state_root": "aa" * 32, "state_hash": "0b" * 32,
                         "source_host": "gonka1hostA"}
    # the content's field 4 is what the user signed: it wins over the entry's copy, which stands in only when the
    # served content (DiffToJSON: nonce and txs) has no field 4; with neither, null, not a guess
    assert (signed[1]["post_state_root"], signed[2]["post_state_root"]) == (None, "dd" * 32)


def test_the_signed_bytes_are_the_served_content_with_the_escrow_and_root_appended():
    from indexer.wire.diffs import diff_contents_from_host_json
    served = SCHEMAS["v4.1"].encode("DiffContent", {"nonce": 3, "txs": [{"finalize_round": {}}]})
    whole = SCHEMAS["v4.1"].encode("DiffContent", {"nonce": 3, "txs": [{"finalize_round": {}}], "escrow_id": "1971",
                                                   "post_state_root": b"\xdd" * 32})
    entry = {"diff": {"nonce": 3, "txs": base64.b64encode(served).decode(),
                      "post_state_root": base64.b64encode(b"\xdd" * 32).decode()}}
    (_, _, _, signed), = diff_contents_from_host_json([entry], "v4.1", "1971")
    assert signed.signed_bytes("1971") == whole and not signed.whole
    entry["diff"]["txs"] = base64.b64encode(whole).decode()  # a host serving the whole message: signed as served
    (_, _, _, signed), = diff_contents_from_host_json([entry], "v4.1", "1971")
    assert signed.signed_bytes("1971") == whole and signed.whole


@pytest.mark.parametrize("escrow_id, host", [("1971", None), ('19"7%1', 'gonka1"ho\\st%s\u00e9\u2028')])
def test_the_template_is_the_record_byte_for_byte(escrow_id, host):
    entry = _entry(3, root=b"\x01" * 32)
    entry["diff"]["txs"] = base64.b64encode(SCHEMAS["v4.1"].encode(
        "DiffContent", {"nonce": 3, "escrow_id": escrow_id, "post_state_root": b"\x01" * 32})).decode()
    line = decode_entries(escrow_id, "v4.1", [entry], False, host).lines()[-1]
    assert line == dumps_record_bytes(signed_diff_record(
        escrow_id, 3, entry["diff"]["txs"], b"\x01" * 65, b"\x01" * 32, b"\x0b" * 32, host))


def test_content_that_is_not_strict_base64_is_refused_naming_the_diff():
    entry = _entry(4)
    entry["diff"]["txs"] = entry["diff"]["txs"].rstrip("=") + "\n"  # a re-wrapped or unpadded string: not as signed
    with pytest.raises(WireDecodeError, match="escrow 1971 diff 4 txs: invalid base64"):
        decode_entries("1971", "v4.1", [entry], False, "gonka1hostA")

"""``indexer evidence`` exports the very bundle the verification stage checks, and the standalone verifier decides on
the exported file as the stage decided on the database: level, failed check and reason, for stored evidence that is
unusable, incomplete or read only from live values."""
from __future__ import annotations

import pytest

from indexer.rules.evidence import build_evidence
from indexer.verify import bundle as bd
from indexer.verify.evidence import FAIL, verify_bundle
from tests.support.helpers import ingest, write_lines
from tests.support.verify_records import EID, EPOCH, records, settlement_record


def _warm_signed() -> list[dict]:
    """Slot 0's settlement signature made by a key today's grants do not list; its participant read live only."""
    import coincurve

    from tests.support.verify_kit import HOSTS, KEYS
    from tests.support.verify_records import settle_msg

    msg = settle_msg(keys={**dict(enumerate(KEYS)), 0: coincurve.PrivateKey(b"\x07" * 32)})
    live = {"kind": "warm_key", "epoch_index": EPOCH, "participant": HOSTS[0], "grantee": "", "read_exact": False}
    return [settlement_record(msg), live]


def _settlement(**changes) -> list[dict]:
    good = settlement_record()
    return [{**good, **changes}]


UNREADABLE = {"msg": None, "settler": None, "nonce": None, "fees": None, "state_root_and_protocol_version": None,
              "msg_unreadable": "the transaction carries 0 MsgSettleDevshardEscrow for escrow 124"}
CASES = {
    "unreadable settlement": (_settlement(**UNREADABLE), ("replayed", "settled")),
    "settlement fields not captured": (_settlement(msg=None, tx_raw=None, nonce=None), ("replayed", None)),
    "settlement read over REST": (_settlement(tx_raw=None, msg_source="rest: /cosmos/tx/v1beta1/txs"),
                                  ("replayed", None)),
    "grants read live only": (_warm_signed(), ("replayed", None)),
    "no settlement": ([], ("replayed", None)),
}


@pytest.mark.parametrize("name", CASES)
def test_the_exported_bundle_verifies_as_the_stage_verified(db_url, conn, tmp_path, name):
    extra, (level, failed_check) = CASES[name]
    recs = [r for r in records() if r["kind"] != "settlement"] + extra
    ingest(db_url, write_lines(tmp_path / "in.ndjson", recs))
    stage = conn.execute("SELECT level, failed_check, failure FROM replay.escrow_verification WHERE escrow_id = %s",
                         (EID,)).fetchone()
    assert stage[:2] == (level, failed_check), stage
    evidence = build_evidence(conn, EID)
    report = verify_bundle(bd.parse_bundle(evidence.bundle.to_json().encode()))
    step = next(s for s in report.steps if s.name == report.failed_step)
    assert (report.level, report.failed_step if step.outcome == FAIL else None, report.failure) == stage
    assert not report.ok and evidence.notes


def test_the_notes_say_what_the_export_cannot_show(db_url, conn, tmp_path):
    recs = [r for r in records() if r["kind"] != "settlement"] + _warm_signed()
    ingest(db_url, write_lines(tmp_path / "in.ndjson", recs))
    notes = build_evidence(conn, EID).notes
    assert any(n.startswith("slot 0 (") and "read from live values" in n for n in notes), notes
    first, *others = build_evidence(conn, EID).bundle.group
    assert first.grants == "live" and {h.grants for h in others} == {"none"}


def test_a_peers_long_multi_line_reason_still_exports_a_bundle_that_loads(db_url, conn, tmp_path):
    from indexer.replay.bundling import note_text

    said = "line one\nline two\x1b[31m " + "x" * 3000
    recs = [r for r in records() if r["kind"] != "settlement"] + _settlement(**{**UNREADABLE, "msg_unreadable": said})
    ingest(db_url, write_lines(tmp_path / "in.ndjson", recs))
    b = bd.parse_bundle(build_evidence(conn, EID).bundle.to_json().encode())
    assert b.settlement_missing.fails and len(b.settlement_missing.reason) == bd.MAX_NOTE
    assert "line one line two [31m" in b.settlement_missing.reason
    assert note_text("a\tb") == "a b"

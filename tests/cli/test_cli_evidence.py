"""`indexer evidence ESCROW [INFERENCE] --out FILE` on the v4.1 release fixture loaded as records, with a governance
limit (the escrow's max_model_len 40) under which its execution timeout (inference 19, max_tokens 50) is a disputable
penalty: the bundle verifies with the standalone verifier, the penalty's derivation included, and a tampered bundle
fails with the reason."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.cli.test_cli import ROOT, run
from tests.support.helpers import ingest, write_lines
from tests.support.verify_records import EID, escrow_record, records


def verify(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "indexer.verify", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def loaded(db_url, tmp_path):
    recs = [escrow_record(max_model_len=40), *records()[1:]]
    ingest(db_url, write_lines(tmp_path / "in.ndjson", recs), rules=True)
    return db_url


def test_the_bundle_verifies_with_its_penalty_and_a_tampered_one_fails(loaded, conn, tmp_path):
    assert conn.execute("SELECT inference_id, rule FROM api.disputable_penalties WHERE escrow_id = %s",
                        (EID,)).fetchall() == [(19, "timeout_over_limit")]
    out = tmp_path / "bundle.json"
    done = run("--database-url", loaded, "evidence", EID, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert b"34 signed diffs, a settlement, 1 penalty derivation(s); checked here to settled" in done.stderr
    assert b"the group lists each slot's own address only: no warm keys captured for the epoch" in done.stderr
    doc = json.loads(out.read_text())
    assert doc["penalties"] == [{
        "rule": "timeout_over_limit (over_limit)", "inference_id": 19, "status": "timed_out",
        "numbers": {"governance_limit": 40, "max_tokens": 50, "input_length": 100, "sibling_input_tokens": 80},
        "sum": ["max_tokens"],
        "compare": ">", "against": "governance_limit", "holds": True,
        "limit_source": {"parameter": "max_model_len", "epoch": 272, "source": "escrow"}}]
    assert (doc["creator"], doc["amount"], len(doc["group"])) == (escrow_record()["creator"], 1_000_000, 5)
    assert doc["settlement"]["approved_versions"] == ["v4.1"] and doc["settlement"]["height"] == 777
    checked = verify(out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "penalty   PASS        timeout_over_limit (over_limit): inference 19 timed_out; max_tokens 50 = 50 > " \
           "governance_limit 40 is true; limit as stated: parameter max_model_len, epoch 272, source escrow" \
           in checked.stdout

    good = out.read_text()
    del doc["diffs"][11]  # nonce 12
    out.write_text(json.dumps(doc))
    tampered = verify(out)
    assert tampered.returncode == 1
    assert "replayed  FAIL        nonce 12: nonce 12 is missing: the next diff served is nonce 13" in tampered.stdout
    doc = json.loads(good)
    doc["penalties"][0]["numbers"]["max_tokens"] = 30  # a stated number the replayed record does not carry
    out.write_text(json.dumps(doc))
    tampered = verify(out)
    assert tampered.returncode == 1
    assert "max_tokens is 50 in the replayed record, the bundle says 30" in tampered.stdout


def test_an_inference_restricts_the_penalties(loaded, tmp_path):
    out = tmp_path / "b.json"
    assert run("--database-url", loaded, "evidence", EID, "19", "--out", str(out)).returncode == 0
    assert [p["inference_id"] for p in json.loads(out.read_text())["penalties"]] == [19]
    done = run("--database-url", loaded, "evidence", EID, "1", "--out", str(out))
    assert done.returncode == 0 and b"no disputable penalty of inference 1" in done.stderr
    assert json.loads(out.read_text())["penalties"] == []
    assert verify(out).returncode == 0


@pytest.mark.parametrize("args, message", [
    (["999"], "escrow 999: not in the database"),
    ([EID, "77"], f"escrow {EID}: no inference 77 in its replay"),
])
def test_unknown_escrow_or_inference_is_bad_input(loaded, tmp_path, args, message):
    out = tmp_path / "b.json"
    done = run("--database-url", loaded, "evidence", *args, "--out", str(out))
    assert done.returncode == 2 and message.encode() in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()


def test_ingest_says_how_many_escrow_logs_it_verified(db_url, tmp_path):
    path = write_lines(tmp_path / "in.ndjson", records())
    done = run("--database-url", db_url, "ingest", str(path), "--no-progress")
    assert done.returncode == 0, done.stderr
    text = done.stderr.decode()
    assert re.search(r"escrow logs verified \(evidence new or changed\)\s*\S\s*1\b", text), text


def test_an_escrow_without_a_signed_log_is_bad_input(db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "in.ndjson", [r for r in records() if r["kind"] != "signed_diff"]))
    out = tmp_path / "b.json"
    done = run("--database-url", db_url, "evidence", EID, "--out", str(out))
    assert done.returncode == 2 and f"escrow {EID}: no signed log captured".encode() in done.stderr
    assert not out.exists()

"""`indexer report --restitution --proposal FILE`: the MsgSubmitProposal JSON paying the amounts to restitute, in the
shape gonka-ai/gonka's x/streamvesting declares (MsgBatchTransferWithVesting{sender, outputs[{recipient, amount}],
vesting_epochs}), and every way it refuses to write one."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.devnet.keys import host_address
from indexer.reports.restitution.collect import EpochCase
from indexer.reports.restitution.proposal import (GOV_AUTHORITY, NothingToPay, ProposalError, address_error, bech32_address,
                                          build)

ROOT = Path(__file__).resolve().parents[2]
A = bech32_address("gonka", hashlib.sha256(b"host a").digest()[:20])
B = bech32_address("gonka", hashlib.sha256(b"host b").digest()[:20])


def row(who, candidate=True, amount=None, test="sprt"):
    return {"participant": who, "restitution_candidate": candidate, "restitution_amount": amount,
            "flipped_test": test if candidate else None, "excluded_reason": None}


def test_gov_authority_and_address_checks():
    # the mainnet gov module account, the sender of the restitution proposals that passed
    assert GOV_AUTHORITY == "gonka10d07y265gmmuvt4z0w9aw880jnsr700j2h5m33"
    assert address_error(GOV_AUTHORITY) is None and address_error(A) is None
    assert address_error("gonka1hostE") == "not a lowercase gonka1… address"
    assert address_error("gonka1hoste") == "not bech32 (characters outside the bech32 alphabet, or too short)"
    assert address_error(A[:-1] + ("q" if A[-1] != "q" else "p")) == "bad bech32 checksum"
    assert address_error("cosmos1abc") == "not a lowercase gonka1… address"
    assert address_error("gonka1bio") == "not bech32 (characters outside the bech32 alphabet, or too short)"


def test_proposal_pays_only_amounts_to_restitute():
    cases = [EpochCase(410, [row(A, amount=44_658_193_112_794, test="downtime"), row(B, candidate=False, amount=0),
                             row(B, candidate=None)]),
             EpochCase(411, [row(A, amount=2), row(B, amount=0)])]  # B flips but fails the other test: 0
    p = build(cases, "50000000000ngonka", 150)
    (msg,) = p["messages"]
    assert msg == {"@type": "/inference.streamvesting.MsgBatchTransferWithVesting", "sender": GOV_AUTHORITY,
                   "outputs": [{"recipient": A, "amount": [{"denom": "ngonka", "amount": "44658193112796"}]}],
                   "vesting_epochs": "150"}
    assert (p["deposit"], p["title"], p["expedited"]) == ("50000000000ngonka",
                                                         "Restitution for disputable penalties, epochs 410-411", False)
    assert f"epoch 410 {A}: downtime outcome flips" in p["summary"]
    assert "1 host-epoch(s) could not be evaluated and are not paid here" in p["summary"]


def test_proposal_refusals():
    with pytest.raises(NothingToPay, match="no amount to restitute in the epochs reported; no proposal written"):
        build([EpochCase(408, [row(A, candidate=False, amount=0)])], "1ngonka")
    bad = A[:-1] + ("q" if A[-1] != "q" else "p")
    with pytest.raises(ProposalError, match=rf"^epoch 410: recipient '{bad}': bad bech32 checksum; no proposal"):
        build([EpochCase(410, [row(bad, amount=5)])], "1ngonka")


def _report(url, *extra, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.run([sys.executable, "-m", "indexer", "--database-url", url, "report", *extra], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_cli_proposes_the_demo_restitution_and_refuses_bad_usage(demo_db_url, tmp_path):
    out, proposal = tmp_path / "r", tmp_path / "proposal.json"
    res = _report(demo_db_url, "--restitution", "--out", str(out), "--proposal", str(proposal),
                  "--deposit", "50000000000ngonka", tmp_path=tmp_path)
    # the devnet's hosts have real bech32 addresses (their devnet keys'): the one host owed is the recipient
    assert res.returncode == 0 and host_address(2078, "hostE") in proposal.read_text(), res.stdout + res.stderr
    assert (out / "restitution-410.md").exists()
    proposal.unlink()
    res = _report(demo_db_url, "--restitution", "--out", str(out), "--proposal", str(proposal), tmp_path=tmp_path)
    assert res.returncode == 2 and "--proposal needs --restitution and --deposit" in res.stdout + res.stderr
    res = _report(demo_db_url, "--restitution", "--proposal", str(proposal), "--deposit", "50 GNK",
                  tmp_path=tmp_path)
    assert res.returncode == 2 and "wants an amount and a denomination" in res.stderr
    res = _report(demo_db_url, "--restitution", "--epochs", "408", "--out", str(out), "--proposal", str(proposal),
                  "--deposit", "1ngonka", tmp_path=tmp_path)
    assert res.returncode == 1 and "no amount to restitute" in res.stdout + res.stderr and not proposal.exists()


def test_cli_writes_the_proposal(db_url, tmp_path):
    import psycopg

    from tests.support.restitution_kit import V1, V2, params, rest_of_epoch, summary
    from tests.support.rules_kit import Log, gov_snapshot, load

    log = Log("9401", epoch=366, slots=[A, V1, V1, V2, V2])
    for k in range(25):
        iid = log.refusal(0) if k < 5 else log.served(0)
        log.invalidate(iid, challenger=1, voters=(3,))
    for _ in range(238):
        log.served(0)
    recs = [gov_snapshot(epoch=366), {**params(366), "confirmation_weight_scales": {}},
            summary(366, A, confirmation_weight=57537, weight=60000, inference_count=263, missed_requests=0,
                    invalidated_inferences=25, validated_inferences=238, excluded_reason="statistical_invalidations"),
            rest_of_epoch(366)]
    load(db_url, tmp_path, recs + log.records)
    with psycopg.connect(db_url) as c:
        amount = c.execute("SELECT restitution_amount FROM api.restitution_impact WHERE participant = %s",
                           (A,)).fetchone()[0]
    assert amount == 60000 * 271_585_585_901_857 // 415488  # newest chain, empty scales: full weight
    proposal = tmp_path / "proposal.json"
    res = _report(db_url, "--restitution", "--out", str(tmp_path / "r"), "--proposal", str(proposal),
                  "--deposit", "50000000000ngonka", "--vesting-epochs", "10", tmp_path=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    msg = json.loads(proposal.read_text())["messages"][0]
    assert msg["outputs"] == [{"recipient": A, "amount": [{"denom": "ngonka", "amount": str(amount)}]}]
    assert msg["vesting_epochs"] == "10" and msg["sender"] == GOV_AUTHORITY

"""Delegation and the amount to restitute (chain v0.2.14 on): fn.delegated_reward_weight against the chain's own
test cases, the published 5 % case, the delegation share captured from /params, and what the view and the report
say for each host (delegation_status, restitution_amount_if_delegating, the "Delegation" section).

Upstream: gonka-ai/gonka inference-chain/x/inference/keeper/bitcoin_rewards.go (applyDelegationRewardPenalties,
applyDelegationRewardTransfers, after PR #1378) and bitcoin_rewards_test.go of the same stored revision."""
from __future__ import annotations

import json
from decimal import ROUND_DOWN, Decimal
from pathlib import Path

import psycopg
import pytest

from indexer.devnet.keys import host_address
from indexer.reports.restitution import collect, markdown
from indexer.reports.restitution.collect import EpochCase
from indexer.reports.restitution.markdown import _delegation
from indexer.wire import chain_records as cr

PARAMS = Path(__file__).resolve().parents[1] / "cases" / "fixtures" / "mainnet"


def _weight(conn, *args) -> int | None:
    marks = ", ".join(["%s"] * len(args))
    return conn.execute(f"SELECT fn.delegated_reward_weight({marks})", args).fetchone()[0]


def test_delegated_weight_follows_the_chains_test_cases(conn):
    # TestApplyDelegationRewardTransfers_RewardOnlyTransfer: alice 1000 delegates 10 % -> 900
    assert _weight(conn, 1000, Decimal("0.1")) == 900
    # ..._RewardOnlyMultipleTransfersUseSourceSnapshot: two 10 % transfers are both taken from 1000 -> 800
    assert _weight(conn, 1000, Decimal("0.1"), 2) == 800
    # TestApplyDelegationRewardPenalties_ReducesSourceOnly: a 10 % penalty -> 900
    assert _weight(conn, 1000, Decimal("0"), 1, Decimal("0.1")) == 900
    # ...PenaltiesThenTransfers_PenaltyReducesTransferBase: 80 % penalty (200 left), then 30 % of 200 -> 140
    assert _weight(conn, 1000, Decimal("0.3"), 1, Decimal("0.8")) == 140
    # ..._DuplicateEntriesAreAdditiveAndClamped: 0.5 + 0.7 of 1000 -> 0, never below
    assert _weight(conn, 1000, Decimal("0"), 1, Decimal("1.2")) == 0
    assert _weight(conn, 1000, Decimal("0.05"), 30) == 0  # transfers clamp at what the source has left
    assert _weight(conn, 19, Decimal("0.05")) == 19  # trunc(0.95) = 0: nothing moves
    assert _weight(conn, 0, Decimal("0.05")) == 0 and _weight(conn, -5, Decimal("0.05")) == 0
    assert _weight(conn, 1000, None) is None  # an unknown share is unknown, not zero
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"transfers must be >= 0 \(got -1\)"):
        _weight(conn, 1000, Decimal("0.05"), -1)


def _gonka(ngonka: int) -> Decimal:
    return (Decimal(ngonka) / 10 ** 9).quantize(Decimal("0.000001"), rounding=ROUND_DOWN)


def test_published_case_is_a_five_percent_share_applied_to_the_weight(conn):
    # the published case (GONKA, six decimals): 27,571.145288 before delegation, 26,192.588023 after = 95 % of it
    assert (Decimal("27571.145288") * Decimal("0.95")).quantize(Decimal("0.000001"), ROUND_DOWN) == \
        Decimal("26192.588023")
    # mainnet's delegation_share is 0.05 (params captures of epochs 267 and 366)
    for capture in ("params_e267.json", "params_e366.json"):
        rec = cr.epoch_params_record(1, {}, json.loads((PARAMS / capture).read_text()), None, False)
        assert rec["delegation_params"]["delegation_share"] == {"value": "5", "exponent": -2}
    # the chain takes the share off the weight, not the coins: with epoch 267's reward and total weight
    # (284,661,946,392,231 ngonka over 541,415) a weight of 52,440 (a multiple of 20) gives exactly 95 %, the
    # published shape; 52,439 moves trunc(2,621.95) = 2,621 units, so it keeps more than 95 % of its coins
    reward, total = 284_661_946_392_231, 541_415
    rows = {w: conn.execute("SELECT fn.reward_share(%s, %s, %s), fn.reward_share(%s, fn.delegated_reward_weight("
                            "%s, 0.05), %s)", (reward, w, total, reward, w, total)).fetchone() for w in (52440, 52439)}
    before, after = rows[52440]
    assert (_gonka(before), _gonka(after)) == (Decimal("27571.590127"), Decimal("26193.010620"))
    assert _gonka(after) == (_gonka(before) * Decimal("0.95")).quantize(Decimal("0.000001"), ROUND_DOWN)
    before, after = rows[52439]
    assert after == reward * (52439 - 2621) // total > before * 95 // 100


def test_status_says_why_per_host(conn):
    def status(version, amount, share, if_delegating=None):
        return conn.execute("SELECT fn.delegation_status(%s, %s, %s, %s)",
                            (version, amount, share, if_delegating)).fetchone()[0]

    assert status("v0.2.16", None, Decimal("0.05")) is None  # the amount itself is unknown
    assert status("v0.2.16", 0, Decimal("0.05")) == "not_applicable"
    assert status("v0.2.13", 10, Decimal("0.05")) == "not_applicable"  # no delegation transfers before v0.2.14
    assert status("v0.2.14", 10, None).startswith("unknown: no delegation_params captured for the epoch")
    text = status(None, 1000, Decimal("0.05"), 950)
    assert text.startswith("unknown: the epoch's delegation reward transfers and penalties")
    assert "owed 950 ngonka" in text
    assert status("v0.2.99", 10, Decimal("0.05")).startswith("unknown: unknown chain version v0.2.99")


def test_demo_report_lists_the_host_whose_delegation_is_unknown(demo_db_url):
    with psycopg.connect(demo_db_url) as c:
        rows = c.execute("SELECT epoch_index, participant, restitution_amount, delegation_share, "
                         "restitution_amount_if_delegating, delegation_status, theoretical_epoch_reward, total_weight "
                         "FROM api.restitution_impact ORDER BY 1, 2").fetchall()
    owed = [r for r in rows if r[2]]
    assert [(r[0], r[1]) for r in owed] == [(410, host_address(2078, "hostE"))]
    _, _, amount, share, if_delegating, status, reward, total = owed[0]
    assert share == Decimal("0.05") and amount == 44_658_193_112_794
    assert if_delegating == reward * (248_000 - 12_400) // total  # hostE's weight less trunc(5 %)
    assert status.startswith("unknown: the epoch's delegation reward transfers")
    assert all(r[5] == "not_applicable" and r[4] is None for r in rows if r[2] == 0)
    assert all(r[5] is None for r in rows if r[2] is None)
    cases = {c.epoch: c for c in collect(demo_db_url)}
    text = markdown(cases[410])
    section = text.split("## Delegation\n", 1)[1].split("\n## ", 1)[0]
    assert f"| `{host_address(2078, 'hostE')}` | 44,658.193112 | 42,425.283457 | 0.05 |" in section
    assert "What settles it: the epoch's DelegationRewardTransferSnapshot" in section
    assert "Amounts before delegation" in text.split("## How the amounts", 1)[0]
    assert "No host has an amount to restitute" in markdown(cases[408])


def test_amounts_stand_before_v0214():
    row = {"participant": "h", "restitution_amount": 5, "delegation_status": "not_applicable"}
    assert "the amounts stand" in "\n".join(_delegation(EpochCase(1, [row])))


def test_malformed_delegation_params_are_refused_by_name():
    from indexer.wire.normalize import NormalizeError

    with pytest.raises(NormalizeError, match="params.delegation_params"):
        cr.epoch_params_record(1, {}, {"params": {"delegation_params": "5 %"}}, None, False)
    assert "delegation_params" not in cr.epoch_params_record(1, {}, {"params": {}}, None, False)

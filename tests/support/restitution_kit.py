"""The E366-shaped restitution case (GonkaLabs GRC-E366 RESTITUTION_REPORT.md: host X invalidated 25 of 263 times,
5 of them disputable, crossing the SPRT only because of those) as records, and the setup that loads it."""
from __future__ import annotations

from pathlib import Path

import psycopg

from tests.support.rules_kit import Log, gov_snapshot, load

X, V1, V2 = "gonka1hostX", "gonka1valid1", "gonka1valid2"
SMALL = [X, V1, V1, V2, V2]  # vote threshold floor(5 * 50 / 100) = 2: V1 challenges (2), V2 votes (4 > 2)
BITCOIN = {"use_bitcoin_rewards": True, "initial_epoch_reward": "323000000000000",
           "decay_rate": {"value": "-475", "exponent": -6}, "genesis_epoch": "1"}


def dec(value: str, exponent: int) -> dict:
    return {"value": value, "exponent": exponent}


def params(epoch, h=("4", 0), p1=("1", -1), exact=True, total_weight=415488):
    return {"kind": "epoch_params", "epoch_index": epoch, "total_weight": total_weight, "params_height": 5644461,
            "params_exact": exact, "bitcoin_reward_params": BITCOIN,
            "validation_params": {"false_positive_rate": dec("5", -2), "bad_participant_invalidation_rate": dec(*p1),
                                  "invalidation_h_threshold": dec(*h), "binom_test_p0": dec("1", -1)}}


def summary(epoch, who, **fields):
    return {"kind": "participant_epoch", "epoch_index": epoch, "participant": who, **fields}


# the weight of the epoch beside a 60,000 host (params' total_weight 415,488): the chain's power cap is computed over
# every ACTIVE host's weight, so an epoch whose captured weights fall short of its total has no known cap
REST_OF_366 = {"weight": 355488, "confirmation_weight": 355488, "raw_confirmation_weight": 355488}


def rest_of_epoch(epoch):
    """An ACTIVE host holding the rest of the epoch's weight; with a 60,000 host the 2-host cap (50 percent) is
    60,000 itself, so that host's figure is not lowered."""
    return summary(epoch, "gonka1rest", **REST_OF_366)


def small_escrow(escrow_id, epoch, invalid, served, disputable=0):
    """X (slot 0) executes `served` good inferences and `invalid` invalidated ones, `disputable` of which are
    0/0 refusals with no payload (refusal_kind unknown, verdict undetermined: disputable)."""
    log = Log(escrow_id, epoch=epoch, slots=SMALL)
    for k in range(invalid):
        iid = log.refusal(0) if k < disputable else log.served(0)
        log.invalidate(iid, challenger=1, voters=(3,))
    for _ in range(served):
        log.served(0)
    return log.records


def e366_anchor(db_url: str, tmp_path: Path, epoch_params: dict | None = None) -> None:
    """Load the anchor epoch 366 through the real pipeline: its governance snapshot, ``epoch_params`` (default
    :func:`params`), X's summary, the rest of the epoch's weight, and X's escrow 9001; the epoch pinned to chain
    v0.2.12, whose share rule the anchor's figures follow (min(confirmation_weight, weight))."""
    recs = [gov_snapshot(epoch=366), params(366) if epoch_params is None else epoch_params,
            summary(366, X, confirmation_weight=57537, weight=60000, raw_confirmation_weight=59000,
                    inference_count=263, missed_requests=0, invalidated_inferences=25, validated_inferences=238,
                    excluded_reason="statistical_invalidations", excluded_height=5652213), rest_of_epoch(366)]
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("INSERT INTO chain.version_override (first_epoch, last_epoch, chain_version, reason) "
                  "VALUES (366, 366, 'v0.2.12', 'test: the anchor epoch under v0.2.12')")
    load(db_url, tmp_path, recs + small_escrow("9001", 366, invalid=25, served=238, disputable=5))

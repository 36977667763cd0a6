"""The epoch reward the devnet pays each host (``epoch_performance_summary.rewarded_coins``), by the chain's rule.

CalculateParticipantBitcoinRewardsWithTransfers (gonka-ai/gonka inference-chain/x/inference/keeper/
bitcoin_rewards.go, the stored revision after PR #1378 "PoC delegation reward-only") pays an ACTIVE host
⌊fixed epoch reward × reward weight / total full weight⌋ ngonka:

* fixed epoch reward = ⌊initial_epoch_reward × exp(decay_rate)^(epoch − genesis_epoch)⌋, exp(decay_rate) being the
  constant types.GetExponent fixes for the decay rate (the same table as sql/functions/34_epoch_reward.sql);
* reward weight: the devnet publishes empty ``confirmation_weight_scales`` and applies no upgrade plan, so the
  version in force is the newest the indexer's chain math knows (v0.2.13 rule on), where empty scales pay the full
  weight (fn.reward_weight, basis ``full``);
* the power cap (ApplyPowerCappingForWeights, the newest revision: only positive weights count) over the weights of
  the ACTIVE hosts, before the downtime test: a host's weight becomes min(weight, cap) (``power_cap``; with the
  default 7 hosts the heaviest holds 322,000 of 1,477,000, 21.8 %, so it never binds; with ``--hosts`` 2 to 4 it
  does); the indexer's fn.power_cap is the same rule;
* total full weight = the sum of every host's weight, excluded ones included (their share goes to governance);
* an excluded host (not ACTIVE) and a host the downtime test fails (indexer/devnet/downtime.py) are paid nothing.

Not applied: delegation transfers (no devnet host delegates).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

# types.GetExponent: exp(decay_rate) for the decay rates the chain accepts (v0.2.8 on)
DECAY_EXPONENT = {"-0.000475": Fraction("0.9995251127946402"), "-0.000001": Fraction("0.9999990000005"),
                  "0.0001": Fraction("1.0001000050001667"), "0": Fraction(1)}


def fixed_epoch_reward(epoch_index: int, initial_epoch_reward: int, decay_rate: str, genesis_epoch: int) -> int:
    """CalculateFixedEpochReward in ngonka (exact: the chain's decimal power of a 16-digit constant)."""
    epochs = epoch_index - genesis_epoch
    if epochs < 0:
        raise ValueError(f"epoch {epoch_index} is before the genesis epoch {genesis_epoch}")
    if decay_rate not in DECAY_EXPONENT:
        raise ValueError(f"unsupported decay rate: {decay_rate} (types.GetExponent knows {', '.join(DECAY_EXPONENT)})")
    if initial_epoch_reward == 0 or epochs == 0:
        return initial_epoch_reward
    return int(initial_epoch_reward * DECAY_EXPONENT[decay_rate] ** epochs)


def _go_div_int_part(numerator: Fraction, denominator: Fraction) -> int:
    """shopspring ``numerator.Div(denominator).IntPart()``: the quotient rounded half away from zero at 16 decimal
    places (DivisionPrecision), then truncated toward zero."""
    scaled = numerator / denominator * 10 ** 16
    whole = abs(scaled.numerator) // abs(scaled.denominator)
    if 2 * (abs(scaled) - whole) >= 1:
        whole += 1
    rounded = whole if scaled >= 0 else -whole
    return int(Fraction(rounded, 10 ** 16))


def power_cap(weights: list[int]) -> int | None:
    """The cap ApplyPowerCappingForWeights sets on the ACTIVE hosts' weights, or None when none applies: only weights
    > 0 count; limit 0.30, 0.50 for 2 of them, 0.40 for 3; sorted ascending, the first w_k > limit x (sumPrev +
    w_k (n - k)) gives cap = IntPart(limit x sumPrev / (1 - limit (n - k))). The chain's two guards cannot fire on
    positive weights with these limits: w_k (1 - limit (n - k)) > limit x sumPrev >= 0 makes the denominator
    positive, and the first binding k has sumPrev >= k with a quotient >= 1 (fn.power_cap_optimal keeps both)."""
    powers = sorted(w for w in weights if w > 0)
    n = len(powers)
    if n <= 1:
        return None
    limit = {2: Fraction(1, 2), 3: Fraction(2, 5)}.get(n, Fraction(3, 10))
    sum_prev = 0
    for k, w in enumerate(powers):
        if w > limit * (sum_prev + w * (n - k)):
            return _go_div_int_part(limit * sum_prev, 1 - limit * (n - k))
        sum_prev += w
    return None


def reward_share(reward: int, weight: int, total_weight: int) -> int:
    """big.Int (weight × reward) / total_weight, truncated; nothing for a non-positive weight or total."""
    if weight <= 0 or total_weight <= 0:
        return 0
    return weight * reward // total_weight


def rewarded_coins(epoch_index: int, weight: int, total_weight: int, bitcoin_params: dict, active: bool,
                   downtime_passes: bool = True) -> int:
    """What the chain pays the host in reward coins for the epoch (``rewarded_coins``)."""
    if not active or not downtime_passes:
        return 0
    reward = fixed_epoch_reward(epoch_index, int(bitcoin_params["initial_epoch_reward"]),
                                _decimal_text(bitcoin_params["decay_rate"]), int(bitcoin_params["genesis_epoch"]))
    return reward_share(reward, weight, total_weight)


def _decimal_text(value: dict) -> str:
    """A chain Decimal ``{"value", "exponent"}`` as the plain text DECAY_EXPONENT is keyed by."""
    d = Decimal(int(value["value"])).scaleb(int(value["exponent"]))
    return "0" if d == 0 else format(d.normalize(), "f")

"""The chain's downtime test as the devnet applies it before paying an epoch's reward.

CalculateParticipantBitcoinRewards (gonka-ai/gonka inference-chain/x/inference/keeper/bitcoin_rewards.go, v0.2.10
on: release/v0.2.10 @faa358dec, as fn.downtime_p0 follows) zeroes the reward weight of a host that fails
``MissedStatTest(missed_requests, inference_count + missed_requests, p0)`` (CheckAndPunishForDowntimeForParticipants),
with p0 from ``getDynamicP0`` over the epoch's sums. The devnet
reproduces the v0.2.10-on rule for the p0 values its governance parameters give (a table p0: 50 … 500 permille);
the critical values are read from sql/functions/31_missed_stat_tables.sql, the indexer's copy of the chain's
tables (calculations/stats_table.go), so the numbers live in one place. The indexer's own test is
fn.downtime_outcome_safe; tests/devnet/test_devnet_payouts.py holds the two to the same verdicts on the demo's epochs.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal

from indexer.db.paths import SQL_DIR

SUPPORTED_PERMILLE = (50, 100, 200, 300, 400, 500)
_RATIO = {50: (1, 20), 100: (1, 10), 200: (1, 5), 300: (3, 10), 400: (2, 5), 500: (1, 2)}


@functools.cache
def critical_tables() -> dict[int, tuple[list[int], list[int]]]:
    """p0 permille -> (totals, critical misses) of the chain's v0.2.10-on MissedStatTest tables."""
    text = (SQL_DIR / "functions" / "31_missed_stat_tables.sql").read_text(encoding="utf-8")
    rows = re.findall(r"\('v0\.2\.10', (\d+),\s*'\{([^}]*)\}'::int\[\],\s*'\{([^}]*)\}'::int\[\]\)", text)
    tables = {int(p): ([int(x) for x in t.split(",")], [int(x) for x in c.split(",")]) for p, t, c in rows}
    if sorted(tables) != list(SUPPORTED_PERMILLE):
        raise RuntimeError(f"31_missed_stat_tables.sql: expected the v0.2.10 tables for p0 permille "
                           f"{SUPPORTED_PERMILLE}, found {sorted(tables)}")
    return tables


def _ceil_supported(permille: int) -> int:
    return next((p for p in SUPPORTED_PERMILLE if permille <= p), 500)


def governance_permille(binom_test_p0: dict | None) -> int:
    """The governance p0 getDynamicP0 starts from: binom_test_p0 (a chain Decimal) in permille rounded up, then up
    to a table p0; 100 when unset. A value past 500 permille (the chain then uses it as is) is refused here."""
    if binom_test_p0 is None:
        return 100
    permille = math.ceil(Decimal(int(binom_test_p0["value"])).scaleb(int(binom_test_p0["exponent"])) * 1000)
    if permille > 500:
        raise ValueError(f"binom_test_p0 of {permille} permille is past the chain's tables")
    return 100 if permille <= 0 else _ceil_supported(permille)


def dynamic_p0_permille(counts: list[tuple[int, int]], governance_permille: int = 100) -> tuple[int, bool]:
    """getDynamicP0 over (missed_requests, inference_count) per participant: the p0 in permille and whether the
    outage circuit breaker skips the punishment. governance_permille: binom_test_p0 rounded up to a table p0."""
    used = [(m, m + n) for m, n in counts if m + n > 0]
    total, missed = sum(t for _, t in used), sum(m for m, _ in used)
    if total < 1000 or len(used) < 5:
        return governance_permille, False
    selected = _ceil_supported(min(missed * 1000 // total + 20, 500))
    return max(selected, governance_permille), selected == 500


def missed_stat_test(missed: int, total: int, p0_permille: int) -> bool:
    """MissedStatTestLookupWithP0: true = the host passes."""
    if total == 0:
        return True
    if total > 990:
        num, den = _RATIO[p0_permille]
        return missed * den <= total * num
    totals, critical = critical_tables()[p0_permille]
    index = max((i for i, t in enumerate(totals) if t <= total), default=None)
    return True if index is None else missed <= critical[index]


def downtime_verdicts(counts: dict[str, tuple[int, int]], governance_permille: int = 100) -> dict[str, bool]:
    """Per participant (missed_requests, inference_count) -> whether the chain pays it (passes or is skipped)."""
    p0, skip = dynamic_p0_permille(list(counts.values()), governance_permille)
    return {addr: skip or missed_stat_test(m, m + n, p0) for addr, (m, n) in counts.items()}

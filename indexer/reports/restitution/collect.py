"""What a restitution report needs for one epoch, read from the api views (no internal table)."""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row

_IMPACT = """
SELECT epoch_index, participant, inference_count, missed, invalid, validated, disputable_missed, disputable_invalid,
       downtime_passes, downtime_passes_without_disputable, sprt_max_llr, sprt_max_llr_without_disputable,
       sprt_threshold, sprt_crossed, sprt_crossed_without_disputable, excluded_reason, confirmation_weight,
       total_weight, theoretical_epoch_reward, reward_at_stake, restitution_candidate, flipped_test, counts_source,
       sprt_p0, sprt_p1, binom_test_p0, downtime_p0, chain_version, chain_version_source, params_exact,
       params_height, params_changed_by_next_epoch, exclusion_matches_sprt, evidence, reward_if_passed,
       restitution_amount, weight_basis, unknown_reason, exclusion_not_reproduced, weight, raw_confirmation_weight,
       zero_confirmation_weight, reward_if_full_weight, chain_rewarded_coins, payout_matches_rule,
       power_cap_may_bind, effective_weight, power_cap, reward_weight, reward_weight_error, delegation_share, restitution_amount_if_delegating, delegation_status, evidence_level,
       payout_by_rule, payout_by_rule_matches, reward_shift_without_disputable
FROM api.restitution_impact WHERE epoch_index = %(epoch)s
ORDER BY restitution_candidate IS NOT TRUE, restitution_amount DESC NULLS LAST, participant"""

# each penalty with its escrow's evidence level and, below settled, the check that failed and why
_PENALTIES = """
SELECT d.escrow_id, d.inference_id, d.participant, d.penalty, d.rule, d.verdict, d.evidence, d.evidence_level,
       v.failed_check, v.failed_nonce, v.failure
FROM api.disputable_penalties d LEFT JOIN api.escrow_verification v ON v.escrow_id = d.escrow_id
WHERE d.epoch_index = %(epoch)s AND d.participant = ANY(%(hosts)s)
ORDER BY d.participant, d.escrow_id, d.inference_id"""

_VARIANTS = """
SELECT variant, participant, missed, invalid, removed_missed, removed_invalid, downtime_passes, sprt_crossed
FROM api.policy_whatif WHERE epoch_index = %(epoch)s AND participant = ANY(%(hosts)s)
ORDER BY participant, array_position(ARRAY['current', 'issue_2078', 'tokenize_2093', 'narrow_prompt_ge_limit',
                                           'hardened_sibling'], variant)"""

# one point per settled escrow: the LLR after the chain's update for it, with and without the disputable penalties
_STEPS = """
SELECT s.participant, s.variant, s.step, s.escrow_id, s.invalid, s.passes
FROM api.restitution_steps s
WHERE s.epoch_index = %(epoch)s AND s.participant = ANY(%(hosts)s) AND s.variant IN ('current', 'without_disputable')
ORDER BY s.participant, s.variant, s.step"""


@dataclass
class EpochCase:
    epoch: int
    rows: list[dict[str, Any]]  # every host of the epoch (api.restitution_impact)
    penalties: list[dict[str, Any]] = field(default_factory=list)  # disputable penalties of the listed hosts
    variants: list[dict[str, Any]] = field(default_factory=list)  # api.policy_whatif rows of the listed hosts
    trajectories: dict[str, dict[str, list[tuple[str, Decimal]]]] = field(default_factory=dict)

    @property
    def candidates(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["restitution_candidate"]]

    @property
    def unknown(self) -> list[dict[str, Any]]:
        """Hosts whose outcome without the disputable penalties cannot be decided (restitution_candidate NULL)."""
        return [r for r in self.rows if r["restitution_candidate"] is None]

    @property
    def excluded(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["excluded_reason"]]

    @property
    def listed(self) -> list[str]:
        """The hosts the report details: candidates, excluded and undecided hosts."""
        seen = {r["participant"]: None for r in self.candidates + self.excluded + self.unknown}
        return list(seen)


def _epochs(conn, epochs: tuple[int, int] | None) -> list[int]:
    sql = "SELECT DISTINCT epoch_index FROM api.restitution_impact"
    if epochs:
        sql += " WHERE epoch_index BETWEEN %s AND %s"
    return [r[0] for r in conn.execute(sql + " ORDER BY 1", epochs or ()).fetchall()]


def _trajectories(conn, epoch: int, case: EpochCase, hosts: list[str]) -> None:
    """LLR after each settlement (the chain's check points), from the per-escrow steps and the chain's terms."""
    by_row = {r["participant"]: r for r in case.rows}
    for r in conn.execute(_STEPS, {"epoch": epoch, "hosts": hosts}).fetchall():
        row = by_row[r["participant"]]
        if row["sprt_p0"] is None or row["sprt_p1"] is None or row["sprt_max_llr"] is None:
            continue  # the SPRT was not computed for this host and epoch (no parameters, or a chain before it)
        terms = conn.execute("SELECT log_fail, log_pass FROM fn.sprt_log_terms(%s, %s, %s)",
                             (row["sprt_p0"], row["sprt_p1"], row["chain_version"])).fetchone()
        series = case.trajectories.setdefault(r["participant"], {}).setdefault(r["variant"], [])
        previous = series[-1][1] if series else Decimal(0)
        series.append((r["escrow_id"], previous + r["invalid"] * terms["log_fail"] + r["passes"] * terms["log_pass"]))


def collect(url: str, epochs: tuple[int, int] | None = None) -> list[EpochCase]:
    out = []
    with psycopg.connect(url, row_factory=dict_row) as conn:
        with conn.cursor(row_factory=tuple_row) as plain:
            wanted = _epochs(plain, epochs)
        for epoch in wanted:
            case = EpochCase(epoch, conn.execute(_IMPACT, {"epoch": epoch}).fetchall())
            hosts = case.listed
            if hosts:
                args = {"epoch": epoch, "hosts": hosts}
                case.penalties = conn.execute(_PENALTIES, args).fetchall()
                case.variants = conn.execute(_VARIANTS, args).fetchall()
                _trajectories(conn, epoch, case, hosts)
            out.append(case)
    return out

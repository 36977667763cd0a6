"""restitution-<epoch>.md and .csv: complete for every epoch. The Markdown says how many hosts were examined, which
outcomes change (with the amounts, and which of them rest on escrow logs verified to settled), every host the chain
excluded, every host that could not be evaluated and why, each disputable penalty of those hosts as a sentence with
its arithmetic and its escrow's evidence level (raw evidence in a collapsed block), the parameters in force and what
the report does not claim. The CSV has one row per host examined, with its evidence level.

Everything that came from the network (addresses, evidence strings) is escaped for the sink: Markdown
metacharacters in prose and tables, a fenced block longer than any backtick run for raw JSON, and CSV cells that a
spreadsheet would read as a formula get a leading apostrophe."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from indexer.reports.restitution.cells import MAX_CELL, code, fenced, md, pipe_safe
from indexer.reports.restitution.cells import csv_cell as _csv_cell
from indexer.reports.restitution.collect import EpochCase
from indexer.reports.restitution.render import NOT_CLAIMED, fmt, gonka, role
from indexer.reports.restitution.verdicts import SETTLED, level_label, raw_json, sentence

CSV_COLUMNS = ("epoch_index", "participant", "outcome", "role", "flipped_test", "amount_gonka", "amount_ngonka",
               "reward_if_passed_ngonka", "weight_basis", "missed", "invalid", "disputable_missed",
               "disputable_invalid", "downtime_passes", "downtime_passes_without_disputable", "sprt_max_llr",
               "sprt_max_llr_without_disputable", "sprt_threshold", "excluded_reason", "exclusion_not_reproduced",
               "unknown_reason", "confirmation_weight", "weight", "raw_confirmation_weight", "total_weight",
               "theoretical_epoch_reward", "chain_version", "params_exact", "disputable_penalties",
               "disputable_evidence_json", "delegation_status", "amount_if_delegating_ngonka", "evidence_level")
def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return out + ["| " + " | ".join(pipe_safe(c if isinstance(c, str) else fmt(c)) for c in r) + " |" for r in rows]


def outcome(row: dict[str, Any]) -> str:
    cand = row["restitution_candidate"]
    return "restitution" if cand else "unknown" if cand is None else "no change"


def _flip(a: Any, b: Any) -> str:
    return f"{fmt(a)} → {fmt(b)}"


def _agrees(row: dict[str, Any]) -> str:
    reason = row["excluded_reason"]
    if reason == "statistical_invalidations":
        if row["sprt_crossed"] is None:
            return "unknown (SPRT not evaluable)"
        return "yes" if row["sprt_crossed"] else f"no (max LLR {fmt(row['sprt_max_llr'])} < H {fmt(row['sprt_threshold'])})"
    return f"not modelled ({md(reason)})"


def _also_at_stake(row: dict[str, Any]) -> str:
    if row["excluded_reason"] == "statistical_invalidations":
        return "the collateral slash and reputation reset that come with the exclusion (not computed)"
    return "none computed"


def _summary(case: EpochCase) -> list[str]:
    n, cands, unknown, excluded = len(case.rows), case.candidates, case.unknown, case.excluded
    lines = ["## Summary", "",
             f"Hosts examined: {n} (every host with a replayed escrow or a captured epoch summary). Outcome changes "
             f"without the disputable penalties: {len(cands)}. Cannot be decided: {len(unknown)}. Excluded by the "
             f"chain: {len(excluded)}.", ""]
    if not cands:
        lines.append("No host's epoch outcome is shown to change when the disputable penalties are removed"
                     + (f"; {len(unknown)} of the {n} hosts could not be evaluated (see \"Hosts that could not be "
                        "evaluated\"), so this is not a finding that nothing changed for them." if unknown
                        else f": both tests were evaluated for all {n} hosts."))
        return lines + [""]
    total = sum((r["restitution_amount"] or 0) for r in cands)
    lines += _table(["participant", "role", "would have been paid (GONKA)", "to restitute (GONKA)",
                     "to restitute (ngonka)", "weight basis", "evidence level"],
                    [[code(r["participant"]), role(r), gonka(r["reward_if_passed"]),
                      f"**{gonka(r['restitution_amount'])}**", fmt(r["restitution_amount"]),
                      md(r["weight_basis"] or "unknown"), md(level_label(r["evidence_level"]))] for r in cands]
                    + [["**Total**", "", "", f"**{gonka(total)}**", fmt(total), "", ""]])
    lines += ["", _evidence_split(cands, total)]
    if any((r["delegation_status"] or "").startswith("unknown") for r in cands):
        lines += ["", "Amounts before delegation: a host that delegated in this epoch is owed less (see "
                  "\"Delegation\")."]
    return lines + [""]


def _evidence_split(cands: list[dict[str, Any]], total: Any) -> str:
    """Which part of the total rests on escrow logs verified to settled, and which hosts' amounts do not."""
    below = [r for r in cands if r["evidence_level"] != SETTLED]
    if not below:
        return ("Evidence: every amount rests on escrow logs verified to settled (each disputable penalty behind it "
                "is in a log whose state roots the chain settled).")
    settled = sum((r["restitution_amount"] or 0) for r in cands if r["evidence_level"] == SETTLED)
    hosts = ", ".join(f"{code(r['participant'])} ({md(level_label(r['evidence_level']))})" for r in below)
    return (f"Evidence: {gonka(settled)} of the {gonka(total)} GONKA rest on escrow logs verified to settled; the "
            f"amounts of {hosts} rest on logs not shown to be the ones the chain settled (api.escrow_verification; "
            "each penalty below says what its level leaves unshown).")


def _amount_rule(case: EpochCase) -> list[str]:
    first = case.rows[0] if case.rows else {}
    return ["## How the amounts are computed", "",
            "Would have been paid = ⌊theoretical epoch reward × reward weight / total weight⌋ (ngonka; theoretical "
            f"epoch reward {fmt(first.get('theoretical_epoch_reward'))}, total weight {fmt(first.get('total_weight'))}"
            "). The reward weight follows the rule of the chain version in force (weight basis: "
            "confirmation_capped = min(confirmation weight, weight); confirmation_rescaled = ⌊confirmation weight × "
            "weight / raw confirmation weight⌋, at most the weight; full = the weight), at most the power cap the "
            "chain sets on the epoch's ACTIVE effective weights. To restitute = what would "
            "have been paid, for a host that passes both tests without the disputable penalties; 0 otherwise.", ""] \
        + _payout_check(case) + _power_cap(case) + _zero_confirmation(case)


def _power_cap(case: EpochCase) -> list[str]:
    """Hosts whose weight the chain's power cap lowers, and hosts whose capped weight is unknown (and why)."""
    over = [r for r in case.rows if r["power_cap_may_bind"]]
    unknown = [r for r in case.rows if (r["reward_weight_error"] or "").startswith("power cap: ")]
    lines = []
    if over:
        lines += ["Power cap: the chain caps the effective weights of the epoch's ACTIVE hosts "
                  "(ApplyPowerCappingForWeights) before it pays; the amounts here are paid on the capped weight of "
                  "the epoch without the disputable penalties (the hosts they excluded back in the list, and a host "
                  "the chain excluded with itself added back).", ""]
        lines += _table(["participant", "effective weight", "cap", "reward weight"],
                        [[code(r["participant"]), fmt(r["effective_weight"]), fmt(r["power_cap"]),
                          fmt(r["reward_weight"])] for r in over]) + [""]
    if unknown:
        lines += ["Power cap unknown: " + "; ".join(
            f"{code(r['participant'])}: {md(_clip(r['reward_weight_error'].removeprefix('power cap: ')))}"
            for r in unknown) + " (their amounts are unknown).", ""]
    return lines


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _payout_check(case: EpochCase) -> list[str]:
    checked = [r for r in case.rows if r["payout_matches_rule"] is not None]
    if not checked:
        return ["Check against the chain: no payout of this epoch was captured (epoch_performance_summary."
                "rewarded_coins), so the rule was not compared with what the chain paid.", ""]
    wrong = [r for r in checked if not r["payout_matches_rule"]]
    lines = [f"Check against the chain: of the {len(checked)} hosts the chain paid in this epoch "
             "(epoch_performance_summary.rewarded_coins), the rule gives exactly the amount paid for "
             f"{len(checked) - len(wrong)}."]
    if wrong:
        lines[0] += (" For the others the chain paid a different amount (delegation transfers, a "
                     "debt deduction, or a chain version whose rule differs): their figures here are not the "
                     "chain's.")
        lines += [""] + _table(["participant", "chain paid (ngonka)", "the rule gives (ngonka)"],
                               [[code(r["participant"]), fmt(r["chain_rewarded_coins"]), fmt(r["payout_by_rule"])]
                                for r in wrong])
    unpaid = [r for r in case.rows if r["chain_rewarded_coins"] == 0 and r["payout_by_rule_matches"] is not None]
    if unpaid:
        odd = [r for r in unpaid if not r["payout_by_rule_matches"]]
        lines += ["", f"Of the {len(unpaid)} hosts the chain paid nothing, the rule gives nothing to "
                  f"{len(unpaid) - len(odd)}."]
        if odd:
            lines[-1] += (" For the others the rule pays a share: the chain had them in another status than "
                          "ACTIVE (not captured for them), or their downtime test differs.")
            lines += [""] + _table(["participant", "the rule gives (ngonka)"],
                                   [[code(r["participant"]), fmt(r["payout_by_rule"])] for r in odd])
    shifted = [r for r in case.rows if r["reward_shift_without_disputable"]]
    if shifted:
        lines += ["", "Restituting changes what others would have got: without the disputable penalties the hosts "
                  "they excluded would have been ACTIVE, which moves the power cap, and the misses removed lower the "
                  "downtime test's dynamic p0, which can fail a host that passed. Neither paid nor recovered:"]
        lines += [""] + _table(["participant", "change of its reward (ngonka)"],
                               [[code(r["participant"]), fmt(r["reward_shift_without_disputable"])] for r in shifted])
    return lines + [""]


def _zero_confirmation(case: EpochCase) -> list[str]:
    zero = [r for r in case.rows if r["zero_confirmation_weight"]]
    if not zero:
        return []
    return ["Hosts with confirmation weight 0 (confirmation PoC left them no confirmed weight): the confirmation "
            "basis pays them nothing, whatever the tests say. What their full weight would give:", ""] \
        + _table(["participant", "weight", "weight basis", "on the chain's rule (GONKA)", "on full weight (GONKA)"],
                 [[code(r["participant"]), f"{r['weight']:,}", md(r["weight_basis"] or "unknown"),
                   gonka(r["reward_if_passed"]), gonka(r["reward_if_full_weight"])] for r in zero]) + [""]


def _incident(case: EpochCase) -> list[str]:
    if not case.candidates:
        return []
    lines = ["## Hosts whose outcome changes", ""]
    for r in case.candidates:
        lines += [f"### {code(r['participant'])}", "",
                  f"- counts ({md(r['counts_source'])}): {fmt(r['inference_count'])} inferences, {fmt(r['missed'])} "
                  f"missed, {fmt(r['invalid'])} invalidated, {fmt(r['validated'])} validated; disputable: "
                  f"{fmt(r['disputable_missed'])} missed, {fmt(r['disputable_invalid'])} invalidated",
                  f"- invalidation SPRT: max LLR {_flip(r['sprt_max_llr'], r['sprt_max_llr_without_disputable'])} "
                  f"without the disputable penalties, against H = {fmt(r['sprt_threshold'])}; crossed "
                  f"{_flip(r['sprt_crossed'], r['sprt_crossed_without_disputable'])}",
                  f"- downtime test: passes {_flip(r['downtime_passes'], r['downtime_passes_without_disputable'])} "
                  f"(p0 {fmt(r['downtime_p0'])})",
                  f"- observed exclusion: {md(r['excluded_reason'] or 'none')}",
                  f"- evidence level of the escrows behind the disputable penalties: "
                  f"{md(level_label(r['evidence_level']))}", ""]
    return lines


def _share(value: Any) -> str:
    return "not captured" if value is None else format(value.normalize(), "f")


def _delegation(case: EpochCase) -> list[str]:
    """Hosts with an amount to restitute that delegation may change, and what would settle it."""
    owed = [r for r in case.rows if r["restitution_amount"]]
    lines = ["## Delegation", ""]
    if not owed:
        return lines + ["No host has an amount to restitute, so delegation changes nothing in this report.", ""]
    unknown = [r for r in owed if (r["delegation_status"] or "").startswith("unknown")]
    if not unknown:
        return lines + ["The chain version in force has no delegation reward transfers (they start with v0.2.14): "
                        "the amounts stand.", ""]
    lines += ["From chain v0.2.14 on, a host that delegates a model passes delegation_share of its reward weight to "
              "its delegatee, and delegation penalties (refusal, no participation) remove more, after the downtime "
              "test (CalculateParticipantBitcoinRewardsWithTransfers). Which hosts delegated in this epoch is not "
              "captured, so these amounts are not settled:", ""]
    lines += _table(["participant", "to restitute (GONKA)", "if it delegated one model (GONKA)", "delegation share",
                     "why unknown"],
                    [[code(r["participant"]), gonka(r["restitution_amount"]),
                      gonka(r["restitution_amount_if_delegating"]), _share(r["delegation_share"]),
                      md(r["delegation_status"].removeprefix("unknown: "))] for r in unknown])
    return lines + ["", "What settles it: the epoch's DelegationRewardTransferSnapshot as the chain settled it (its "
                    "transfers {model, from, to, share} and penalties {participant, fraction}), or the host's own "
                    "record of the models it delegated and to whom. Then the amount is ⌊theoretical epoch reward × "
                    "fn.delegated_reward_weight(reward weight, share, models delegated, penalty) / total weight⌋, "
                    "plus what hosts that delegated to it passed on.", ""]


def _excluded(case: EpochCase) -> list[str]:
    lines = ["## Hosts the chain excluded", ""]
    if not case.excluded:
        return lines + ["The chain excluded no host in this epoch (excluded_participants as captured).", ""]
    lines += _table(["participant", "chain's reason", "indexer's test agrees", "SPRT max LLR with → without (H)",
                     "disputable missed / invalid", "downtime passes with → without", "would have been paid (GONKA)",
                     "also at stake", "restitution", "evidence level"],
                    [[code(r["participant"]), md(r["excluded_reason"]), _agrees(r),
                      f"{_flip(r['sprt_max_llr'], r['sprt_max_llr_without_disputable'])} ({fmt(r['sprt_threshold'])})",
                      f"{fmt(r['disputable_missed'])} / {fmt(r['disputable_invalid'])}",
                      _flip(r["downtime_passes"], r["downtime_passes_without_disputable"]),
                      gonka(r["reward_if_passed"]), _also_at_stake(r), outcome(r),
                      md(level_label(r["evidence_level"]))] for r in case.excluded])
    return lines + [""]


def _unknown(case: EpochCase) -> list[str]:
    lines = ["## Hosts that could not be evaluated", ""]
    if not case.unknown:
        return lines + ["None: both tests were evaluated, with and without the disputable penalties, for every "
                        "host examined.", ""]
    lines += _table(["participant", "what is missing", "disputable missed / invalid", "would have been paid (GONKA)",
                     "evidence level"],
                    [[code(r["participant"]), md(r["unknown_reason"] or "not stated"),
                      f"{fmt(r['disputable_missed'])} / {fmt(r['disputable_invalid'])}", gonka(r["reward_if_passed"]),
                      md(level_label(r["evidence_level"]))] for r in case.unknown])
    return lines + [""]


def _penalties(case: EpochCase) -> list[str]:
    lines = ["## Disputable penalties of the hosts above", ""]
    if not case.penalties:
        return lines + ["None of the hosts listed above has a disputable penalty.", ""]
    host = None
    for k, p in enumerate(case.penalties, 1):
        if p["participant"] != host:
            host = p["participant"]
            lines += [f"### {code(host)}", ""]
        lines += [f"{k}. Escrow {code(p['escrow_id'])}, inference {code(p['inference_id'])}, penalty "
                  f"{md(p['penalty'])}, rule {md(p['rule'])}, evidence level {md(level_label(p['evidence_level']))}: "
                  f"{md(sentence(p))}", "",
                  "   <details><summary>raw evidence (api.disputable_penalties.evidence)</summary>", ""]
        lines += ["   " + x for x in fenced(raw_json(p))] + ["", "   </details>", ""]
    return lines


def _not_computed(case: EpochCase) -> list[str]:
    """The chain's rules that can exclude a host in this epoch and that the indexer does not compute."""
    first = case.rows[0] if case.rows else {}
    vp = ((first.get("evidence") or {}).get("params") or {})
    version = first.get("chain_version")
    lines = ["## Tests not computed for this epoch", "",
             "- The consecutive-failures rule (ComputeStatus, before the SPRT: a host is INVALID when "
             "false_positive_rate ^ consecutive invalidations < quick_failure_threshold) is not modelled: a "
             "statistical_invalidations exclusion the SPRT does not reproduce may come from it."]
    minor = version.removeprefix("v0.2.") if version else ""
    if version and version.startswith("v0.2.") and minor.isdigit() and int(minor) < 5:
        lines.append(f"- Chain {md(version)} decided invalidations with a float z-score, not the SPRT: the SPRT "
                     "columns are not computed for this epoch.")
    if not vp.get("captured", True):
        lines.append("- No validation_params snapshot was captured for this epoch: neither test could be computed.")
    return lines + ["- Delegation transfers (not captured; see \"Delegation\") are not applied to the amounts.", ""]


def _parameters(case: EpochCase) -> list[str]:
    lines = ["## Parameters in force", ""]
    if not case.rows:
        return lines + ["No host was examined, so no parameters are shown.", ""]
    first = case.rows[0]
    ev = first["evidence"] or {}
    lines += _table(["parameter", "value"], [
        ["false_positive_rate (SPRT p0)", first["sprt_p0"]],
        ["bad_participant_invalidation_rate (SPRT p1)", first["sprt_p1"]],
        ["invalidation_h_threshold (H)", first["sprt_threshold"]],
        ["binom_test_p0 (downtime)", first["binom_test_p0"]],
        ["snapshot exact (read as of the epoch)", first["params_exact"]],
        ["read at height", first["params_height"]],
        ["chain version", f"{md(first['chain_version'] or 'newest (assumed)')} ({md(first['chain_version_source'])})"],
    ])
    notes = [ev.get("params", {}).get("inexact"), ev.get("params", {}).get("changed_by_next_epoch")]
    return lines + [""] + [f"> {md(n)}" for n in notes if n] + [""]


def _variants(case: EpochCase) -> list[str]:
    lines = ["## Rule variants", ""]
    if not case.variants:
        return lines + ["No host is listed above, so there is no variant table.", ""]
    lines += ["Penalties each variant would assign and the resulting outcomes (docs/restitution.md in the indexer "
              "gives each variant as a formula).", ""]
    return lines + _table(["participant", "variant", "missed", "invalid", "downtime passes", "SPRT crossed"],
                          [[code(v["participant"]), md(v["variant"]), v["missed"], v["invalid"],
                            v["downtime_passes"], v["sprt_crossed"]] for v in case.variants]) + [""]


def markdown(case: EpochCase) -> str:
    lines = [f"# Restitution report: epoch {case.epoch}", ""]
    for part in (_summary, _amount_rule, _incident, _delegation, _excluded, _unknown, _penalties, _parameters,
                 _not_computed):
        lines += part(case)
    lines += ["## What this report does not claim", ""] + [f"- {t}" for t in NOT_CLAIMED] + [""]
    lines += _variants(case)
    return "\n".join(lines).rstrip("\n") + "\n"


def _penalty_cells(case: EpochCase, participant: str) -> tuple[str, str]:
    mine = [p for p in case.penalties if p["participant"] == participant]
    text = " / ".join(sentence(p) for p in mine)
    raw = json.dumps([json.loads(raw_json(p)) for p in mine], sort_keys=True, separators=(",", ":"))
    note = f"{len(mine)} penalties: see restitution-{case.epoch}.md"
    return (text if len(text) <= MAX_CELL else note), (raw if len(raw) <= MAX_CELL else note)


def rows_csv(case: EpochCase) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in case.rows:
        text, raw = _penalty_cells(case, r["participant"])
        values = {**r, "outcome": outcome(r), "role": role(r),
                  "amount_gonka": gonka(r["restitution_amount"]).replace(",", "")
                  if r["restitution_amount"] is not None else "",
                  "amount_ngonka": r["restitution_amount"], "reward_if_passed_ngonka": r["reward_if_passed"],
                  "amount_if_delegating_ngonka": r["restitution_amount_if_delegating"],
                  "disputable_penalties": text, "disputable_evidence_json": raw}
        w.writerow([_csv_cell(values.get(c)) for c in CSV_COLUMNS])
    return buf.getvalue()


def write_reports(cases: list[EpochCase], out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for case in cases:
        for suffix, text in (("md", markdown(case)), ("csv", rows_csv(case))):
            path = out / f"restitution-{case.epoch}.{suffix}"
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written

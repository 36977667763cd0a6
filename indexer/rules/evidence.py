"""An escrow's evidence bundle (``indexer evidence``): the very bundle the verification stage checks
(:func:`indexer.replay.bundling.stage_bundle`: its stored log, settlement, group and creator, and what they cannot
show, stated so that ``python -m indexer.verify`` decides as the stage does), plus each disputable penalty's
derivation from the rules' findings, stated so that the standalone verifier re-derives it
(:func:`indexer.verify.evidence.check_penalty`).

Every disputable rule turns on one question: is the request shown over the governance limit
(``fn.shown_over_limit``: ``max_tokens > limit``, or ``prompt >= limit``, or ``prompt + max_tokens > limit``)? The
derivation states the first of those the finding's numbers decide, with the numbers themselves: ``max_tokens`` and
``input_length`` are the inference's own (the verifier compares them with its replayed record), the prompt count is
the one the rule used (``prompt_tokens`` of a context refusal, ``sibling_input_tokens`` of a sibling), and the limit
names its source (the escrow's ``max_model_len``, or the epoch snapshot's model args at the snapshot's height).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import psycopg

from indexer.replay.bundling import Unusable, stage_bundle
from indexer.replay.material import load_material
from indexer.verify import bundle as bd
from indexer.verify.evidence import GRANT_GAPS

# the prompt count each rule decides on (rules.disputable evidence keys, sql/rules/60_disputable.sql)
PROMPT_KEY = {"invalidated_context_refusal": "prompt_tokens", "error_miss_sibling": "sibling_input_tokens",
              "timeout_over_limit": "sibling_input_tokens"}
LIMIT_PARAMETER = {"escrow": "max_model_len", "model_args": "model_args --max-model-len"}


class EvidenceError(ValueError):
    """No bundle can be made (unknown escrow or inference, no signed log): a one-line reason."""


@dataclass
class Evidence:
    bundle: bd.Bundle
    notes: list[str] = field(default_factory=list)  # what the bundle leaves out, and why


def snake(status: str) -> str:
    """replay.inference's status name as the verifier names it (TimedOut -> timed_out)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", status).lower()


def _number(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def derivation(rule: str, verdict: str, evidence: dict, status: str, inference_id: int,
               limit_source: dict) -> bd.Penalty | str:
    """The stated derivation of one finding, or why its numbers cannot state one."""
    limit = _number(evidence.get("governance_limit"))
    if limit is None:
        return "no governance limit in its evidence"
    prompt_key = PROMPT_KEY.get(rule)
    numbers = {"governance_limit": limit}
    for name in ("max_tokens", "input_length", prompt_key):
        if name is not None and _number(evidence.get(name)) is not None:
            numbers[name] = evidence[name]
    max_tokens, prompt = numbers.get("max_tokens"), numbers.get(prompt_key)
    if max_tokens is not None and max_tokens > limit:
        terms, compare = ("max_tokens",), ">"
    elif prompt is not None and prompt >= limit:
        terms, compare = (prompt_key,), ">="
    elif prompt is not None and max_tokens is not None:
        terms, compare = (prompt_key, "max_tokens"), ">"
    else:
        return "its prompt count and max_tokens are not both known, and neither alone is over the limit"
    total = sum(numbers[t] for t in terms)
    holds = total > limit if compare == ">" else total >= limit
    return bd.Penalty(rule=f"{rule} ({verdict})"[:bd.MAX_TEXT], inference_id=inference_id, status=snake(status),
                      numbers=numbers, sum=terms, compare=compare, against="governance_limit", holds=holds,
                      limit_source=limit_source)


def _limit_source(source: str | None, epoch: int | None, params_height: int | None) -> dict:
    """Where the limit a finding used came from, as the bundle states it (the height only for the snapshot's args)."""
    out = {"parameter": LIMIT_PARAMETER.get(source), "epoch": epoch,
           "height": params_height if source == "model_args" else None, "source": source}
    return {k: v for k, v in out.items() if v is not None}


def findings(conn: psycopg.Connection, escrow_id: str, inference_id: int | None, epoch: int | None) -> list[tuple]:
    """The escrow's disputable findings (of ``inference_id`` when given): rule, verdict, evidence, status,
    inference id, and where the limit it used came from: fn.record_limit, the limit of the model the record's Start
    signed (the escrow's source when that is the escrow's model), with the epoch's snapshot height."""
    rows = conn.execute(
        "SELECT d.rule, d.verdict, d.evidence, i.status, d.inference_id, lim.limit_source, p.params_height "
        "FROM rules.disputable d "
        "JOIN replay.inference i ON i.escrow_id = d.escrow_id AND i.inference_id = d.inference_id "
        "LEFT JOIN rules.escrow_limit el ON el.escrow_id = d.escrow_id "
        "LEFT JOIN rec.start_tx s ON s.escrow_id = d.escrow_id AND s.inference_id = d.inference_id "
        "AND s.epoch_index = el.epoch_index "
        "LEFT JOIN LATERAL fn.record_limit(el.model_id, el.governance_limit, el.limit_source, el.epoch_index, "
        "s.model) lim ON el.escrow_id IS NOT NULL "
        "LEFT JOIN rec.epoch_params p ON p.epoch_index = %s "
        "WHERE d.escrow_id = %s AND (%s::bigint IS NULL OR d.inference_id = %s) ORDER BY d.inference_id, d.rule",
        (epoch, escrow_id, inference_id, inference_id)).fetchall()
    return [(*row[:5], _limit_source(row[5], epoch, row[6])) for row in rows]


def build_evidence(conn: psycopg.Connection, escrow_id: str, inference_id: int | None = None) -> Evidence:
    """The bundle of ``escrow_id`` with its disputable penalties (only those of ``inference_id`` when given)."""
    material = load_material(conn, [escrow_id]).get(escrow_id)
    if material is None:
        raise EvidenceError(f"escrow {escrow_id}: not in the database")
    try:
        bundle = stage_bundle(material)
    except Unusable as exc:
        raise EvidenceError(exc.reason if escrow_id in exc.reason else f"escrow {escrow_id}: {exc.reason}") from None
    notes = list(bundle.notes)
    if all(h.grants == "none" for h in bundle.group):
        notes.append(f"the group lists each slot's own address only: {GRANT_GAPS['none']}")
    else:
        notes.extend(f"slot {h.slot} ({h.address}): {GRANT_GAPS[h.grants]}" for h in bundle.group
                     if h.grants in GRANT_GAPS)
    if bundle.settlement is None:
        notes.append(f"{bundle.settlement_missing.reason}: the bundle can reach replayed at most")
    elif bundle.settlement.tx_raw is None:
        notes.append(f"the settlement has no raw transaction (tx {bundle.settlement.tx_hash}): the bundle can reach "
                     f"replayed at most")
    if inference_id is not None and conn.execute(
            "SELECT 1 FROM replay.inference WHERE escrow_id = %s AND inference_id = %s",
            (escrow_id, inference_id)).fetchone() is None:
        raise EvidenceError(f"escrow {escrow_id}: no inference {inference_id} in its replay")
    rows = findings(conn, escrow_id, inference_id, material.escrow["epoch_index"])
    penalties = []
    for rule, verdict, evidence, status, inference, limit_source in rows:
        made = derivation(rule, verdict, evidence or {}, status, inference, limit_source)
        if isinstance(made, str):
            notes.append(f"{rule}: inference {inference}: not in the bundle: {made}")
        else:
            penalties.append(made)
    if not rows:
        notes.append("no disputable penalty" + (f" of inference {inference_id}" if inference_id is not None else ""))
    return Evidence(dataclasses.replace(bundle, penalties=tuple(penalties)), notes)

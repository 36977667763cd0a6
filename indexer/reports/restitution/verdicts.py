"""One disputable penalty (api.disputable_penalties) as a sentence with its arithmetic, for a committee to read:
what was penalised, the numbers that show the request did not fit (or that nothing settles it), and where each
number came from; then, when its escrow's log is verified below settled, what that level leaves unshown
(api.escrow_verification). The raw evidence stays beside the sentence (the report's collapsed block, the CSV's own
column), never cut into the prose."""
from __future__ import annotations

import html
import json
from typing import Any, Mapping

from indexer.alerts.messages import plain

LIMIT_SOURCES = {"model_args": "epoch snapshot, model args", "escrow": "escrow max_model_len"}
PROMPT_SOURCES = {"sibling": "signed input tokens of a sibling Finish with the same prompt",
                  "error_text": "the executor's own vLLM error message",
                  "input_length": "the gateway's signed estimate"}


def _n(value: Any) -> str:
    """An integer with thousands separators; anything else as text ('unknown' when absent)."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return str(value).lower()
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


def _int(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _limit(ev: Mapping[str, Any]) -> str:
    source = LIMIT_SOURCES.get(str(ev.get("limit_source")), ev.get("limit_source"))
    return f"governance limit {_n(ev.get('governance_limit'))}" + (f" ({source})" if source else "")


def _sum(a: Any, b: Any) -> str:
    """'a + max_tokens b = a+b' with the total, or without it when a number is missing."""
    x, y = _int(a), _int(b)
    total = f" = {x + y:,}" if x is not None and y is not None else ""
    return f"{_n(a)} + max_tokens {_n(b)}{total}"


def _compare(a: Any, b: Any, limit: Any) -> str:
    x, y, lim = _int(a), _int(b), _int(limit)
    if x is None or y is None or lim is None:
        return "?"
    return ">" if x + y > lim else "≤"


def _challenge(ev: Mapping[str, Any]) -> str:
    c = ev.get("challenge")
    if not isinstance(c, Mapping):
        return ""
    text = (f" Invalidated by {_n(c.get('votes_invalid'))} invalid slot-weight against a vote threshold of "
            f"{_n(c.get('vote_threshold'))} ({_n(c.get('votes_valid'))} valid)")
    if c.get("suspect_invalid_weight"):
        voters = ", ".join(str(v) for v in c.get("suspect_voters") or [])
        text += (f"; {_n(c.get('suspect_invalid_weight'))} of that weight came from suspect voters ({voters}), "
                 f"without whom the record would be {c.get('outcome_without_suspects') or 'unknown'}")
    return text + "."


def _refusal(verdict: str | None, ev: Mapping[str, Any]) -> str:
    prompt, max_tokens, limit = ev.get("prompt_tokens"), ev.get("max_tokens"), ev.get("governance_limit")
    source = PROMPT_SOURCES.get(str(ev.get("prompt_tokens_source")), ev.get("prompt_tokens_source") or "unknown")
    bound = "at least " if ev.get("prompt_is_lower_bound") else ""
    head = f"Invalidated context refusal ({ev.get('refusal_kind') or 'unknown'}): "
    if prompt is None:
        return head + f"no prompt-token count is known, so nothing shows it fits the {_limit(ev)}; a refusal " \
                      "counts against the host only when shown to fit." + _challenge(ev)
    sign = _compare(prompt, max_tokens, limit)
    if verdict == "over_limit":
        if _int(prompt) is not None and _int(limit) is not None and _int(prompt) >= _int(limit):
            why = f"prompt {bound}{_n(prompt)} ≥ {_limit(ev)}, so nothing can be generated"
        else:
            why = f"prompt {bound}{_sum(prompt, max_tokens)} {sign} {_limit(ev)}"
        return head + f"{why} (prompt tokens from {source}): the request did not fit." + _challenge(ev)
    return head + (f"prompt {bound}{_sum(prompt, max_tokens)} {sign} {_limit(ev)} (prompt tokens from {source}"
                   f"{', a lower bound' if bound else ''}): no evidence settles whether it fits, and a refusal "
                   "counts against the host only when shown to fit.") + _challenge(ev)


def _timeout(ev: Mapping[str, Any]) -> str:
    reason = ev.get("timeout_reason") or "unknown"
    head = f"Timeout ({reason}) counted as a miss on a request shown over the limit: "
    if ev.get("shown_by") == "max_tokens":
        return head + f"max_tokens {_n(ev.get('max_tokens'))} > {_limit(ev)} alone."
    return head + (f"sibling inference {_n(ev.get('sibling_inference_id'))}'s signed input "
                   f"{_sum(ev.get('sibling_input_tokens'), ev.get('max_tokens'))} "
                   f"{_compare(ev.get('sibling_input_tokens'), ev.get('max_tokens'), ev.get('governance_limit'))} "
                   f"{_limit(ev)}.")


def _error_miss(verdict: str | None, ev: Mapping[str, Any]) -> str:
    s, m, lim = ev.get("sibling_input_tokens"), ev.get("max_tokens"), ev.get("governance_limit")
    rules = []
    if ev.get("accepted_current_rule") is not None:
        rules.append(f"today's sibling rule {'admits' if ev['accepted_current_rule'] else 'does not admit'} it")
    if ev.get("accepted_hardened_rule") is not None:
        rules.append("the hardened rule (sibling input + max_tokens ≤ limit) "
                     f"{'admits' if ev['accepted_hardened_rule'] else 'does not'}")
    return (f"Error-miss counted as a miss on an unbilled client fault ({ev.get('refusal_kind') or 'unknown'}, "
            f"basis {ev.get('client_fault_basis') or 'unknown'}): sibling inference "
            f"{_n(ev.get('sibling_inference_id'))}'s signed input {_sum(s, m)} {_compare(s, m, lim)} {_limit(ev)}"
            + (f"; {' and '.join(rules)}" if rules else "") + f" (verdict {verdict or 'unknown'})."
            + _error_miss_not_shown_to_fit(verdict, ev))


def _error_miss_not_shown_to_fit(verdict: str | None, ev: Mapping[str, Any]) -> str:
    """Why an error-miss both sibling rules admit is disputable: the refusal's own count shows it over."""
    if verdict != "over_limit" or not (ev.get("accepted_current_rule") and ev.get("accepted_hardened_rule")):
        return ""
    p, m = ev.get("refusal_prompt_tokens"), ev.get("max_tokens")
    source = PROMPT_SOURCES.get(str(ev.get("refusal_prompt_tokens_source")), "unknown")
    return (f" Yet the refusal is not shown to fit: prompt {_sum(p, m)} {_compare(p, m, ev.get('governance_limit'))} "
            f"{_limit(ev)} (prompt tokens from {source}).")


def _arithmetic(penalty: Mapping[str, Any]) -> str:
    ev = penalty.get("evidence") or {}
    rule = penalty.get("rule")
    if rule == "invalidated_context_refusal":
        return _refusal(penalty.get("verdict"), ev)
    if rule == "timeout_over_limit":
        return _timeout(ev)
    if rule == "error_miss_sibling":
        return _error_miss(penalty.get("verdict"), ev)
    return f"{penalty.get('penalty') or 'penalty'} under rule {rule or 'unknown'}, verdict " \
           f"{penalty.get('verdict') or 'unknown'} (see the evidence)."


def sentence(penalty: Mapping[str, Any]) -> str:
    """The penalty as a sentence with its arithmetic, then its evidence note (one line, no raw JSON)."""
    note = evidence_note(penalty)
    return _arithmetic(penalty) + (f" {note}" if note else "")


SETTLED = "settled"  # the level at which a log is shown to be the one the chain settled (fn.evidence_levels)
REASON_LIMIT = 200   # characters of a verification failure's reason quoted in a sentence
_BELOW = {"none": "the escrow's log was not verified, so the penalty rests on the log as the hosts served it",
          "signed": "the user signed every diff, but the state roots were not recomputed from the log",
          "replayed": "every signed state root was recomputed, but the final one was not shown to be the root the "
                      "chain settled"}
# the records check: the log verified, but the tx records the findings were derived from are not the log's
_RECORDS = "the tx records the penalty was derived from contradict the escrow's verified signed log"


def one_line(text: Any, most: int) -> str:
    """A peer-influenced text on one line, cut at ``most`` characters with an ellipsis; control characters (a
    terminal escape sequence), line separators and bidirectional overrides left after the whitespace is collapsed
    are shown as U+FFFD (the alerts' rule), so the text can neither drive a terminal nor reorder a report line."""
    flat = plain(" ".join(str(text).split()))
    return flat if len(flat) <= most else flat[:most - 1] + "…"


HTML_LIMIT = 1000  # characters of one data value on the HTML page (it may appear in several places: cell, filter)


def html_text(value: Any, most: int = HTML_LIMIT) -> str:
    """A data value as HTML text or an attribute value: escaped (quotes too), control, line-separator and
    bidirectional-override characters shown as U+FFFD, so a participant cannot reorder the table cell or line it is
    in (html.escape leaves U+202E as it is), and cut at ``most`` characters with an ellipsis (the same cut wherever
    the value appears, so a filter's value still matches its rows)."""
    text = plain(str(value))
    return html.escape(text if len(text) <= most else text[:most - 1] + "…", quote=True)


def level_label(level: str | None) -> str:
    """A row's evidence level for a table cell: settled as it is, a lower level marked, none behind the row."""
    if level is None:
        return "no disputable penalty"
    return level if level == SETTLED else f"{level} (below settled)"


def evidence_note(penalty: Mapping[str, Any]) -> str:
    """What the escrow's evidence level leaves unshown, with the check that failed and why; at settled, the note the
    verification row carries (something it did not check: settled with a reservation); empty at a settled row with
    no note or when the level was not read."""
    level = penalty.get("evidence_level")
    if level == SETTLED and penalty.get("failure"):
        return f"Evidence level settled, with a reservation: {one_line(penalty['failure'], REASON_LIMIT)}."
    if level is None or level == SETTLED:
        return ""
    check, nonce, failure = penalty.get("failed_check"), penalty.get("failed_nonce"), penalty.get("failure")
    why = _RECORDS if check == "records" else _BELOW.get(level, "the level is not one the indexer knows")
    if check:
        at = f" at nonce {nonce}" if nonce is not None else ""
        why += f"; the {one_line(check, 20)} check failed{at}"
        why += f": {one_line(failure, REASON_LIMIT)}" if failure else ""
    elif failure:
        why += f"; verification stopped: {one_line(failure, REASON_LIMIT)}"
    return f"Evidence level {one_line(level, 20)}, below settled: {why}."


def raw_json(penalty: Mapping[str, Any]) -> str:
    """The evidence as compact, key-sorted JSON, whole (never cut)."""
    return json.dumps(penalty.get("evidence") or {}, sort_keys=True, separators=(",", ":"), default=str)

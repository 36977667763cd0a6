"""Read the numbers an error message states, and which wording (family) states them: vLLM's and
OpenAI-compatible context-length refusals in every released form. Pure, stdlib only, total: no text raises.

family (None when nothing matched; every wording, its source and releases is a row of
tests/cases/data/vllm_wordings.json, see vllm_wordings.md there)
  '1'   "… However, you requested P tokens in the messages| in the input for X …"  (M None)
  'total' "… However, you requested T tokens" and nothing more (not a vLLM wording: the OpenAI-compatible
        short form, or a family-2 text cut short): T is the total, the prompt's share unknown (P None)
  '2'   "… you requested T tokens (P in the messages, M in the completion)"
  '3'   "… However, your request has P input tokens"
  '4'   "'max_tokens' or 'max_completion_tokens' is too large: M. … is L tokens and your
        request has P input tokens (M > L - P)"
  '5'   "You passed P input tokens and requested M output tokens. However, the model's context
        length is only L tokens …";  '5c' the "input characters" variant
  '6'   "… you requested M output tokens and your prompt contains [at least] P input tokens,
        for a total of [at least] T tokens";  '6c' "… contains C characters (more than X …)"
  '7'   "… However, your prompt contains [at least] P input tokens, which exceeds this limit
        even without any output tokens";  '7c' "… your prompt contains C characters …"
  'openai'      "… your messages resulted in P tokens" / "…, however you requested T tokens
                (P in your prompt; M for the completion)"
  'legacy'      prompt-only forms without "maximum context length is": "Input prompt (P tokens)
                is too long and exceeds limit of L", "The decoder prompt (length P)[ plus the
                number of requested output tokens (at least 1)] | Prompt length of P is longer
                than the maximum model length of L", "The prompt (total length P) is too long to
                fit into the model (context length L)", "The engine prompt length P exceeds the
                max_model_len L", "Input length (P) exceeds model's maximum context length (L)"; plugin
                forms "Prompt length (P) fills or exceeds this model's maximum context length (L)", "The prompt
                is P tokens, which exceeds the model's maximum context length of L tokens"
  'max_tokens'  "max_tokens=M[ ]cannot be greater than max_model_len=…=L", "'max_tokens' (M)
                cannot be greater than the model's maximum context length (L)" (M alone > L)
  'encoder'     "The encoder prompt (length E)[ plus …] is longer than the maximum model length of X": a length
                refusal without usable numbers (E counts the encoder input, not the decoder prompt; X is the
                encoder cache size in vllm/v1/engine/input_processor.py @009daaee), so both stay None
  'budget'      "The instructions and latest message (including required tool context) cannot fit in the
                available input token budget. …" (Responses API truncation, vllm/renderers/response_truncation.py
                @e39c7d91): no numbers
  'parameter'   no wording matched, but the VLLMValidationError suffix names parameter input_tokens or input_text,
                vLLM's own test for a context overflow (is_context_overflow, same file): no numbers are taken
                from it (its value may be a truncated count); suffix_value keeps it
  'generic'     only "maximum context length is L tokens" matched, in a text that names no other refusal
                (a rate limit, quota, LoRA, "must be at least", an empty prompt: then no family at all)
  'window'      "exceeds the context window of this model" (OpenAI, no numbers)
  'code'        no wording, but code ``context_length_exceeded``
  'tool_choice' "\"auto\" tool choice requires --enable-auto-tool-choice and
                --tool-call-parser to be set" (a capability refusal, not context length)

Matching runs on a casefolded copy (Kelvin sign U+212A -> k, ſ -> s) with whitespace runs
collapsed and typographic apostrophes mapped to '. Numbers are ASCII digits, plain or in strict
comma groups of three (no release prints those; a reformatting copy still reads exactly); one
above 2**63-1 gives no signal (None) while the wording still counts. A trailing " None" and
"(parameter=X, value=Y)" / "(parameter=X)" / "(value=Y)" are stripped in any order and kept;
parameter input_tokens fills a missing P, input_text missing characters, max_tokens /
max_completion_tokens / max_output_tokens a missing M. Lower bound: "at least" inside a wording that
bounds the prompt (not the legacy "(at least 1)" output count; not an "at least" in a later sentence)
or in devshard's ", for a total of at least T tokens" right after family 2, or the truncation artefact of
§6.3: P == L - M + 1 for families 5 and 6, P == L + 1 for family 7 (0.32+ truncates at L + 1).
Character variants: P None, requested_total None, flag False, count in reported_prompt_chars.
requested_total: stated total (for 2/6 the "for a total of at least T" value when present),
else P + M (None past 2**63-1, as a stated number), else P for the prompt-only families.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

__all__ = ["INT63_MAX", "MessageParse", "REPORTED_FIELDS", "Reported", "parse_error_message"]

INT63_MAX = 2**63 - 1
SCAN_LIMIT = 1 << 20  # text scanning looks at the first 1 MiB


@dataclass(frozen=True, slots=True)
class Reported:
    """The numbers (and wording family) an error text states; a message's parse and a payload's (indexer.refusals.vllm) carry them, listed once here."""

    family: str | None = None
    reported_limit: int | None = None
    reported_prompt_tokens: int | None = None
    reported_prompt_is_lower_bound: bool = False
    reported_max_tokens: int | None = None
    requested_total: int | None = None
    reported_prompt_chars: int | None = None
    suffix_parameter: str | None = None
    suffix_value: int | None = None


REPORTED_FIELDS = tuple(f.name for f in fields(Reported))


@dataclass(frozen=True, slots=True)
class MessageParse(Reported):
    """What the error text alone says."""

    is_context_length: bool = False


NO_TEXT = MessageParse()  # what no text says

# ------------------------------------------------------------------------- message text
# A count: plain ASCII digits, or digits in strict groups of three ("400,000"). vLLM and OpenAI print
# plain ints; the grouped form is accepted so a reformatting proxy's copy still reads exactly.
_N = r"([0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)"
_CL = r"maximum context length is " + _N + r" tokens"
_HW = r"[.,]? however,? "
_YR = r"you requested "
_PASSED = r" output tokens\.? however,? the model's context length is only " + _N + r" tokens"
_MAXTOK = r"'?max_(?:completion_|output_|new_)?tokens'?"
# (family, pattern, group names); first hit wins, so the order matters. The table of real wordings
# with their sources is tests/cases/data/vllm_wordings.json (README beside it).
_FAMILIES = tuple((fam, re.compile(pat, re.ASCII), names) for fam, pat, names in (
    ("4", r"max_tokens'? or '?max_completion_tokens'? is too large:? " + _N + r"\.? (?:this model's )?"
     + _CL + r",? and your request has " + _N + r" input tokens", "MLP"),
    ("6c", _CL + _HW + _YR + _N + r" output tokens and your prompt contains " + _N + r" characters", "LMC"),
    ("6", _CL + _HW + _YR + _N + r" output tokens and your prompt contains (?:at least )?" + _N
     + r" input tokens(?:,? for a total of (?:at least )?" + _N + r" tokens)?", "LMPT"),
    ("7c", _CL + _HW + r"your prompt contains " + _N + r" characters", "LC"),
    ("7", _CL + _HW + r"your prompt contains (?:at least )?" + _N + r" (?:input )?tokens", "LP"),
    ("5c", r"you passed " + _N + r" input characters and requested " + _N + _PASSED, "CML"),
    ("5", r"you passed " + _N + r" input tokens and requested " + _N + _PASSED, "PML"),
    ("2", _CL + _HW + _YR + r"(?:at least )?" + _N + r" tokens \(" + _N + r" in the messages, " + _N
     + r" in the completion\)", "LTPM"),
    ("openai", _CL + _HW + _YR + _N + r" tokens \(" + _N + r" in your prompt; " + _N
     + r" for the completion\)", "LTPM"),
    ("openai", _CL + _HW + r"your messages resulted in " + _N + r" tokens", "LP"),
    ("1", _CL + _HW + _YR + r"(?:at least )?" + _N + r" tokens in the (?:messages|input)\b", "LP"),
    ("total", _CL + _HW + _YR + r"(?:at least )?" + _N + r" tokens(?![0-9a-z ]{0,40}\()", "LT"),
    ("3", _CL + _HW + r"your request has (?:at least )?" + _N + r" input tokens", "LP"),
    ("max_tokens", r"max_(?:completion_|output_)?tokens=" + _N + r" ?cannot be greater than (?:[a-z_]+=)+"
     + _N, "ML"),
    ("max_tokens", _MAXTOK + r" \(" + _N + r"\) cannot be greater than the model's maximum context length \("
     + _N + r"\)", "ML"),
    ("encoder", r"encoder prompt \(length " + _N + r"\)(?: plus the number of requested output tokens \(at least 1\))?"
     r" is longer than the maximum model length of " + _N, ""),
    ("legacy", r"input prompt \(" + _N + r" tokens\) is too long and exceeds limit of " + _N, "PL"),
    ("legacy", r"prompt (?:\((?:length )?" + _N + r"(?: tokens)?\)|length of " + _N + r")(?: plus the number of"
     r" requested output tokens \(at least 1\))? is longer than the maximum model length of " + _N, "PPL"),
    ("legacy", r"prompt \(total length " + _N + r"\) is too long to fit into the model \(context length "
     + _N + r"\)", "PL"),
    ("legacy", r"prompt length " + _N + r" exceeds the max_model_len " + _N, "PL"),
    ("legacy", r"(?:input|prompt) length \(" + _N + r"\) (?:fills or )?exceeds (?:the |this )?model's maximum context"
     r" length \(" + _N + r"\)", "PL"),
    ("legacy", r"the prompt is " + _N + r" tokens, which exceeds the model's maximum context length of " + _N
     + r" tokens", "PL"),
    ("budget", r"cannot fit in the available input token budget", ""),
    ("generic", _CL, "L"),
    ("window", r"exceeds the context window of this model", ""),
))
# vLLM's own test for a context overflow (vllm/renderers/response_truncation.py@e39c7d91 is_context_overflow): a
# VLLMValidationError whose parameter is one of these
_OVERFLOW_PARAMETERS = frozenset({"input_tokens", "input_text"})
_CHARS = frozenset({"5c", "6c", "7c"})
_WITH_M = frozenset({"2", "4", "5", "6", "openai"})
_PROMPT_ONLY = frozenset({"1", "3", "7", "legacy", "openai"})
_AT_LEAST_TEXT = frozenset({"1", "2", "3", "6", "7", "openai"})  # "at least" there bounds the prompt
# devshard's tail after a family-2 wording: ", for a total of at least T tokens" (gonka-devshard.md §6.2)
_TOTAL_TAIL = re.compile(r",? for a total of at least " + _N + r" tokens", re.ASCII)
# Another refusal that a text naming only the limit ('generic') may be about: a rate limit, a LoRA or sampling
# check, an empty prompt. Such a text is not read as a context-length refusal.
_NOT_CONTEXT = re.compile(r"rate.?limit|too many requests|per min|\b[rt]pm\b|quota|\blora\b|must be at least"
                          r"|cannot be empty|is empty", re.ASCII)
_TOOL_CHOICE = re.compile(r"tool choice requires --enable-auto-tool-choice", re.ASCII)
# VLLMValidationError.__str__: " (parameter=X, value=Y)", " (parameter=X)" or " (value=Y)".
_SUFFIX = re.compile(r"\((?:parameter=([^,()]*?)(?:,\s*value=([^()]*))?|value=([^()]*))\)\Z")
_INT_TEXT = re.compile(r"\s*\+?([0-9]{1,40})\s*\Z", re.ASCII)
_WS = re.compile(r"\s+")
_APOSTROPHE_CHARS = "\u2018\u2019\u201b\u02bc\u02b9\u00b4\u0060\u2032"
_APOSTROPHES = str.maketrans({c: "'" for c in _APOSTROPHE_CHARS})


def num(digits: str | None) -> int | None:
    """ASCII digit string (groups of three may be comma-separated) -> int; None when absent or above
    2**63-1 (no signal)."""
    if digits is None:
        return None
    digits = digits.replace(",", "").lstrip("0") or "0"
    if len(digits) > 19:
        return None
    value = int(digits)
    return value if value <= INT63_MAX else None


def int_text(raw: str) -> int | None:
    """'400' / ' +400 ' -> 400; negative, non-numeric or oversized -> None."""
    m = _INT_TEXT.match(raw)
    return num(m.group(1)) if m else None


def _strip_suffixes(text: str) -> tuple[str, str | None, str | None]:
    param = value = None
    found = False
    for _ in range(4):
        text = text.rstrip()
        if text.endswith("None") and len(text) > 4 and text[-5].isspace():
            text = text[:-4]
            continue
        tail = text[-512:]  # a suffix is short; never run the regex over the whole text
        m = _SUFFIX.search(tail) if tail.endswith(")") else None
        if m is None or (m.start() == 0 and len(tail) == len(text)):
            break
        if not found:  # the last suffix is the error's own; an earlier one belongs to a cause
            found = True
            param = m.group(1).strip() if m.group(1) is not None else None
            raw = m.group(2) if m.group(2) is not None else m.group(3)
            value = raw.strip() if raw is not None else None
        text = text[: len(text) - len(tail) + m.start()]
    return text, param, value


def parse_error_message(message: str) -> MessageParse:
    """Classify one error message (no envelope). Never raises."""
    try:
        return _parse_message(message)
    except Exception:  # pragma: no cover - defensive; the parser is total by design
        return NO_TEXT


def _fold(text: str) -> str:
    """The text matching runs on: casefolded, typographic apostrophes as ', white space runs as one space. The
    translation and the substitution run only when they could change something (over an ordinary message they
    cost ~20 µs of the parse's ~50 and change nothing): the one apostrophe in ASCII is the backtick, and every
    white space character but the space is unprintable (categories Cc, Zs, Zl, Zp)."""
    folded = text.casefold()  # before the apostrophe test: casefold can make one (U+0149 -> U+02BC n)
    if not folded.isascii() or "`" in folded:
        folded = folded.translate(_APOSTROPHES)
    if not folded.isprintable() or "  " in folded:
        folded = _WS.sub(" ", folded)
    return folded


def _parse_message(message: str) -> MessageParse:
    if not isinstance(message, str) or not message.strip():
        return NO_TEXT
    core, sparam, sval = _strip_suffixes(message[:SCAN_LIMIT])
    folded = _fold(core)
    svalue = int_text(sval) if sval is not None else None
    for family, pattern, names in _FAMILIES:
        m = pattern.search(folded)
        if m is not None:
            break
    else:
        if (sparam or "").casefold() in _OVERFLOW_PARAMETERS:
            return MessageParse(is_context_length=True, family="parameter", suffix_parameter=sparam,
                                suffix_value=svalue)
        family = "tool_choice" if _TOOL_CHOICE.search(folded) else None
        return MessageParse(family=family, suffix_parameter=sparam, suffix_value=svalue)
    got: dict[str, int | None] = {}
    for name, raw in zip(names, m.groups()):
        if raw is not None:
            got[name] = num(raw)
    limit, prompt, max_tok, chars, total = (got.get(k) for k in "LPMCT")
    if family == "generic" and _NOT_CONTEXT.search(folded):
        return MessageParse(suffix_parameter=sparam, suffix_value=svalue)
    # "at least" counts inside the wording itself, or in devshard's total tail right after a family-2 wording; an
    # "at least" further on (another sentence, another error) says nothing about this count
    tail = _TOTAL_TAIL.match(folded, m.end()) if family == "2" else None
    at_least = family in _AT_LEAST_TEXT and ("at least" in m.group(0) or tail is not None)
    if tail is not None:
        total = num(tail.group(1))
    chars_family = family in _CHARS
    pname = (sparam or "").casefold()
    if pname == "input_tokens" and prompt is None and not chars_family and family not in ("max_tokens", "window",
                                                                                           "encoder"):
        prompt = svalue
    if pname == "input_text" and chars is None and (chars_family or family == "generic"):
        chars = svalue
    if pname in ("max_tokens", "max_completion_tokens", "max_output_tokens") and max_tok is None:
        max_tok = svalue
    if chars_family or family in ("max_tokens", "generic", "window"):
        total = None
    elif total is None and prompt is not None:
        if max_tok is not None and family in _WITH_M:
            total = prompt + max_tok if prompt + max_tok <= INT63_MAX else None  # as a stated one past it: no signal
        elif family in _PROMPT_ONLY:
            total = prompt
    lower = prompt is not None and not chars_family and at_least
    if prompt is not None and limit is not None:
        # vLLM tokenizes with truncation at max_input_tokens + 1, so that count means "at least":
        # max_input_tokens is L - M where the message names M (5, 6), L itself from 0.32 (7).
        if family in ("5", "6") and max_tok is not None:
            lower = lower or prompt == limit - max_tok + 1
        elif family == "7":
            lower = lower or prompt == limit + 1
    return MessageParse(is_context_length=True, family=family, reported_limit=limit, reported_prompt_tokens=prompt,
                        reported_prompt_is_lower_bound=lower, reported_max_tokens=max_tok, requested_total=total,
                        reported_prompt_chars=chars, suffix_parameter=sparam, suffix_value=svalue)

"""Parse a devshard Finish's stored ``response_payload`` and classify the refusal.

Pure, stdlib only, total: no input (``None``, bytes, HTML, truncated JSON, deep nesting,
huge numbers, binary junk) raises. Envelopes (protocol reference §6.1): the stored payload
``{"events": ["data: {...}", ..., "data: [DONE]"]}`` whose data lines hold a nested
(``{"error": {...}, "id": "devshard-…"}``) or flat (``{"object": "error", ...}``) error; a
bare JSON body (nested or flat); or bare text.

refusal_kind
  ``unknown``            payload None / empty / whitespace.
  ``context_length``     is_client_fault AND (the message matches a context-length family OR
                         the code is the OpenAI string ``context_length_exceeded``).
  ``other_client_fault`` is_client_fault, not context length (e.g. tool-choice refusal).
  ``not_client_fault``   everything else (5xx, output before the error, missing or non-400/422
                         codes, malformed envelopes, HTML, text, truncated JSON). Numbers and
                         ``family`` are still filled when the text holds a context-length
                         wording; the kind stays ``not_client_fault`` by design.

is_client_fault is IsClientFaultErrorResponse and is_terminal_error IsTerminalErrorResponse, decided by
:mod:`indexer.refusals.consensus`, which follows the chain's Go code (common/completionapi/terminal_error.go)
decision for decision: an events envelope, every ``data:`` line but ``[DONE]`` valid JSON, no chunk carrying output
(text, content, reasoning, tool or function calls, a refusal, logprobs content, completion tokens, or a chunk that
does not decode), ≥ 1 top-level error, and every error code printing as 400 or 422. A code given as a word
(``context_length_exceeded``) or left null is not a client fault there, so it is not one here: family ``code``
still records the word. A bare JSON body (an HTTP error body outside the envelope) gets the client-fault test on
itself as one data line, and is never terminal.
A non-string event makes the envelope malformed (neither client fault nor terminal, though its error is still read).

The message text itself is read by :mod:`indexer.refusals.messages` (its wording families and numbers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from indexer.refusals import consensus
from indexer.refusals.messages import (INT63_MAX, NO_TEXT, REPORTED_FIELDS, SCAN_LIMIT, MessageParse, Reported,
                                       int_text, num, parse_error_message)

__all__ = ["RefusalParse", "parse_response_payload"]

_MESSAGE_KEEP = 8192  # a raw-text "message" is cut to this many characters


@dataclass(frozen=True, slots=True, kw_only=True)
class RefusalParse(Reported):
    """What the whole stored body says: the refusal's kind and error envelope, and the text's numbers."""

    refusal_kind: str
    is_client_fault: bool = False
    is_terminal_error: bool = False
    error_code: int | None = None
    error_type: str | None = None
    message: str | None = None


# ------------------------------------------------------------------------- envelopes
@dataclass(slots=True)
class _Err:
    code: int | None
    code_ok: bool  # counts as a client-fault code
    cl_code: bool  # the string code context_length_exceeded
    type: str | None
    message: str | None


_DECODER = json.JSONDecoder(parse_int=lambda s: None if s.startswith("-") else num(s))


def _loads(text: str):
    """json.loads with huge or negative ints -> None; ValueError on bad JSON or deep nesting."""
    try:
        return consensus.json_loads(text, _DECODER)
    except RecursionError as exc:
        raise ValueError("nesting too deep") from exc


def _err(details: consensus.ErrorDetails) -> _Err:
    """An error event with its code read as a number where it is one (error_code) and judged as the chain does."""
    raw = details.code
    if isinstance(raw, bool) or raw is None:
        code = None
    elif isinstance(raw, int):
        code = raw if 0 <= raw <= INT63_MAX else None
    elif isinstance(raw, float):
        code = int(raw) if raw.is_integer() and 0 <= raw <= INT63_MAX else None
    elif isinstance(raw, str):
        code = int_text(raw)
    else:
        code = None
    cl = isinstance(raw, str) and raw.strip().casefold() == "context_length_exceeded"
    return _Err(code, consensus.is_client_fault_code(raw), cl, details.type, details.message)


def _from_events(events: list) -> RefusalParse:
    """An events envelope, judged by the chain's predicates (:mod:`indexer.refusals.consensus`): terminal is
    IsTerminalErrorResponse, client IsClientFaultErrorResponse. Events that are not strings make the envelope
    malformed (both False, as Go's Unmarshal fails); an error object among them is still read for its wording."""
    malformed = consensus.event_lines(events) is None
    errors: list[_Err] = []
    bad: list[str] = []
    output = False
    objs = []
    for event in events:
        if not isinstance(event, str):  # null is an empty line; anything else only in a malformed envelope
            if event is not None:
                objs.append(event)
            continue
        data = consensus.sse_data(event)
        if data is None:
            continue
        try:
            objs.append(consensus.loads(data))
        except ValueError:
            bad.append(data)
    for obj in objs:
        details = consensus.error_event(obj)
        if details is not None:
            errors.append(_err(details))
        output = output or consensus.carries_output(obj)
    terminal = not malformed and bool(errors or bad)
    client = not (malformed or bad or output) and bool(errors) and all(e.code_ok for e in errors)
    return _finish(errors, client, terminal, "\n".join(bad)[:SCAN_LIMIT])


def _finish(errors: list[_Err], client: bool, terminal: bool, fallback: str = "") -> RefusalParse:
    # Report the first error whose text is a context-length wording, else the first one with
    # the context_length_exceeded code, else the first error; unparsable lines come last.
    chosen: _Err | None = None
    text = NO_TEXT
    for e in errors:
        parsed = parse_error_message(e.message) if e.message else NO_TEXT
        if parsed.is_context_length:
            chosen, text = e, parsed
            break
        if chosen is None or (e.cl_code and not chosen.cl_code):
            chosen, text = e, parsed
    if not text.is_context_length and fallback:
        alt = parse_error_message(fallback)
        text = alt if alt.is_context_length else text
    is_cl = text.is_context_length or (chosen is not None and chosen.cl_code)
    family = text.family if text.family is not None else ("code" if is_cl else None)
    kind = ("context_length" if is_cl else "other_client_fault") if client else "not_client_fault"
    return _build(kind, client, terminal, chosen, text, family)


def _build(kind, client, terminal, err: _Err | None, text: MessageParse, family, message=None):
    numbers = {name: getattr(text, name) for name in REPORTED_FIELDS}
    numbers["family"] = family
    return RefusalParse(refusal_kind=kind, is_client_fault=client, is_terminal_error=terminal,
                        error_code=err.code if err else None, error_type=err.type if err else None,
                        message=err.message if err else message, **numbers)


def _from_text(text: str) -> RefusalParse:
    parsed = parse_error_message(text[:SCAN_LIMIT])
    keep = text.strip()[:_MESSAGE_KEEP] if parsed.family is not None else None
    return _build("not_client_fault", False, False, None, parsed, parsed.family, keep)


def parse_response_payload(payload: str | bytes | None) -> RefusalParse:
    """Classify a stored response payload. Never raises."""
    try:
        return _parse_payload(payload)
    except Exception:  # pragma: no cover - defensive; worst case for a non-empty body
        return RefusalParse(refusal_kind="not_client_fault")


def _parse_payload(payload) -> RefusalParse:
    if isinstance(payload, (bytes, bytearray, memoryview)):
        payload = bytes(payload).decode("utf-8", errors="replace")
    if not isinstance(payload, str) or not payload.lstrip("\ufeff").strip():
        return RefusalParse(refusal_kind="unknown")
    text = payload.lstrip("\ufeff")
    try:
        doc = _loads(text)
    except ValueError:
        return _from_text(text)
    events = consensus.field(doc, "events") if isinstance(doc, dict) else None
    if isinstance(events, list):
        return _from_events(events)
    # a bare body (an HTTP error body given as the payload, outside the devshard envelope): the chain's test
    # applied to it as one data line; never terminal (IsTerminalErrorResponse needs the envelope)
    details = consensus.error_event(doc)
    if details is None:
        return _from_text(text)
    err = _err(details)
    return _finish([err], err.code_ok and not consensus.carries_output(doc), False)

"""The chain's own predicates over a stored response payload, reproduced decision for decision.

gonka-ai/gonka ``common/completionapi/terminal_error.go`` (@27056f66) is "the consensus rule for MsgErrorMiss. Every
host must compile against this one implementation": ``IsTerminalErrorResponse``, ``IsClientFaultErrorResponse`` and
``chunkCarriesOutput``. Whether validators accepted an error-miss, and whether a 0/0 Finish is a client fault, is
what those functions return, so this module follows Go's decoding rules rather than a reading of the JSON:

* the payload is ``SerializedStreamedResponse{Events []string}``: a JSON object whose ``events`` is an array of
  strings (null elements are empty strings); anything else and both predicates are false;
* a line is data when, trimmed of Unicode white space, it starts with ``data:``; its payload is the trimmed rest,
  skipped when empty or ``[DONE]`` (an event is one line: no splitting on newlines);
* ``json.Valid`` rejects ``NaN``/``Infinity``; Go's decoder matches object keys exactly or case-insensitively, the
  last matching key winning; a value of the wrong JSON type for a struct field is an unmarshal error: the chunk
  then "carries output" (fail closed), and the line is then no error event;
* a numeric ``code`` is decoded as float64 (beyond its range: an unmarshal error) and printed with ``fmt.Sprint``,
  so 400, 400.0 and 4e2 are all "400"; a client fault is a code that prints, trimmed, as "400" or "422".

Only the decisions come from here; the message wording is classified in :mod:`indexer.refusals.vllm`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

# unicode.IsSpace, which strings.TrimSpace uses (Python's str.strip would also take \x1c-\x1f)
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000"
_UINT64_MAX = 2**64 - 1
CLIENT_FAULT_CODE_TEXTS = frozenset({"400", "422"})  # IsClientFaultError


class _Mismatch(Exception):
    """A JSON value of the wrong type for the Go field it is decoded into (json.UnmarshalTypeError)."""


@dataclass(frozen=True, slots=True)
class ErrorDetails:
    """A line's top-level error, as terminalErrorFromLines extracts it (``code`` is the decoded JSON value)."""
    type: str | None
    code: Any
    message: str | None


def go_trim(text: str) -> str:
    return text.strip(_GO_SPACE)


def event_lines(events: Any) -> list[str] | None:
    """The ``events`` of a payload object as ``[]string``, or None when Go's Unmarshal would fail."""
    if not isinstance(events, list):
        return None if events is not None else []
    if not all(e is None or isinstance(e, str) for e in events):
        return None
    return [e or "" for e in events]


def sse_data(line: str) -> str | None:
    """sseDataJSON: the JSON text of a ``data:`` line, or None (not data, empty, or [DONE])."""
    trimmed = go_trim(line)
    if not trimmed.startswith("data:"):
        return None
    payload = go_trim(trimmed[5:])
    return None if payload in ("", "[DONE]") else payload


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def loads(text: str | bytes) -> Any:
    """json.Valid + decode: ValueError for anything Go's json.Valid refuses (NaN and Infinity included)."""
    try:
        return json_loads(text, _DECODER)
    except RecursionError as exc:  # nesting Python cannot follow (Go's limit is 10,000 levels)
        raise ValueError("nesting too deep") from exc


def json_loads(text: str | bytes, decoder: json.JSONDecoder) -> Any:
    """``json.loads(text, **the decoder's options)`` through one decoder made once: json.loads builds a decoder per
    call when given options, half the cost of reading a data line. Bytes and a leading BOM take json.loads itself,
    for its decoding of bytes and its BOM error."""
    if type(text) is str and not text.startswith("\ufeff"):
        return decoder.decode(text)
    return json.loads(text, object_hook=decoder.object_hook, parse_float=decoder.parse_float,
                      parse_int=decoder.parse_int, parse_constant=decoder.parse_constant,
                      object_pairs_hook=decoder.object_pairs_hook, strict=decoder.strict)


def fields(obj: dict) -> dict:
    """The values Go's decoder assigns to struct fields, by tag: each key casefolded, the last of the keys that fold
    alike winning (Go matches a key to a tag exactly or case-insensitively, and a later match overwrites). Every tag
    read here is lowercase ASCII, its own casefold, so an exact match folds to it too. One pass per object, not
    one per field read (a dozen reads per refusal)."""
    return {key.casefold(): item for key, item in obj.items()}


def field(obj: dict, name: str) -> Any:
    """The value Go's decoder assigns to the struct field tagged ``name`` (absent: None, which every field here
    treats as its zero value)."""
    return fields(obj).get(name)


def _string(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Mismatch
    return value


def _any(value: Any) -> Any:
    """A value decoded into ``any``: numbers become float64, so one beyond its range is an unmarshal error."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        try:
            float(value)
        except OverflowError:
            raise _Mismatch from None
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Mismatch
        return value
    if isinstance(value, list):
        for item in value:
            _any(item)
        return value
    for item in value.values():
        _any(item)
    return value


def _message_carries_output(part: Any) -> bool:
    """outputMessage.carriesOutput for a ``delta`` / ``message`` value (null: none)."""
    if part is None:
        return False
    if not isinstance(part, dict):
        raise _Mismatch
    part = fields(part)
    texts = [_string(part.get(k)) for k in ("content", "reasoning_content", "reasoning", "refusal")]
    tool_calls = part.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise _Mismatch
    return any(texts) or bool(tool_calls) or part.get("function_call") is not None


def _chunk_output(obj: Any) -> bool:
    if obj is None:
        return False
    if not isinstance(obj, dict):
        raise _Mismatch
    found = False
    obj = fields(obj)
    usage = obj.get("usage")
    if usage is not None:
        if not isinstance(usage, dict):
            raise _Mismatch
        tokens = field(usage, "completion_tokens")
        if tokens is not None:
            if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= _UINT64_MAX:
                raise _Mismatch  # uint64: an integer literal in range, not 1.0 or -1
            found = tokens > 0
    choices = obj.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise _Mismatch
    for choice in choices or ():
        if choice is None:
            continue
        if not isinstance(choice, dict):
            raise _Mismatch
        # every field is decoded (a later wrong type still fails the whole chunk), then any output counts
        choice = fields(choice)
        outputs = [_message_carries_output(choice.get("delta")), _message_carries_output(choice.get("message")),
                   bool(_string(choice.get("text")))]
        logprobs = choice.get("logprobs")
        if logprobs is not None:
            if not isinstance(logprobs, dict):
                raise _Mismatch
            content = field(logprobs, "content")
            if content is not None and not isinstance(content, list):
                raise _Mismatch
            outputs.append(bool(content))
        found = found or any(outputs)
    return found


def carries_output(obj: Any) -> bool:
    """chunkCarriesOutput of one decoded data line: output tokens, text, a message part, tool or function call,
    refusal or logprobs content, or a chunk that does not decode as the Go struct (fail closed)."""
    try:
        return _chunk_output(obj)
    except _Mismatch:
        return True


def error_event(obj: Any) -> ErrorDetails | None:
    """The line's top-level error (``{"error":{…}}``, or ``{"object":"error","message":…}`` with a non-empty
    message) as terminalErrorFromLines finds it; None when there is none or the line does not decode."""
    if not isinstance(obj, dict):
        return None
    try:
        obj = fields(obj)
        error = obj.get("error")
        if error is not None and not isinstance(error, dict):
            raise _Mismatch
        if error is not None:
            error = fields(error)
        inner = None if error is None else ErrorDetails(_string(error.get("type")) or None, _any(error.get("code")),
                                                          _string(error.get("message")) or None)
        kind, code, message = _string(obj.get("object")), _any(obj.get("code")), _string(obj.get("message"))
        top_type = _string(obj.get("type"))
    except _Mismatch:
        return None
    if inner is not None:
        return inner
    if kind == "error" and message:
        return ErrorDetails(top_type or None, code, message)
    return None


def is_client_fault_code(code: Any) -> bool:
    """IsClientFaultError: ``strings.TrimSpace(fmt.Sprint(code))`` is "400" or "422"."""
    if isinstance(code, str):
        return go_trim(code) in CLIENT_FAULT_CODE_TEXTS
    if isinstance(code, bool) or not isinstance(code, (int, float)):
        return False
    try:
        return float(code) in (400.0, 422.0)  # fmt.Sprint of a float64 prints 400.0 as "400"
    except OverflowError:
        return False

"""Tests for indexer.refusals.vllm (pure: no database, no fixtures from conftest)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.refusals.messages import INT63_MAX, MessageParse, REPORTED_FIELDS, parse_error_message
from indexer.refusals.vllm import RefusalParse, parse_response_payload

WORDINGS = Path(__file__).resolve().parents[1] / "cases" / "data" / "vllm_wordings.json"
ROWS = json.loads(WORDINGS.read_text("utf-8"))["rows"]
MESSAGE_ROWS = [r for r in ROWS if "message" in r]
PAYLOAD_ROWS = [r for r in ROWS if "payload" in r]
MESSAGE_FIELDS = [f.name for f in dataclasses.fields(MessageParse)]
REFUSAL_FIELDS = [f.name for f in dataclasses.fields(RefusalParse)]
NUMERIC_FIELDS = ("reported_limit", "reported_prompt_tokens", "reported_max_tokens", "requested_total",
                  "reported_prompt_chars", "suffix_value", "error_code")


def _defaults(fields, expect):
    want = {name: (False if name.startswith("is_") or name.endswith("_lower_bound") else None) for name in fields}
    unknown = set(expect) - set(want)
    assert not unknown, f"table names unknown fields {unknown}"
    want.update(expect)
    return want


def _events(*objs, done=True):
    lines = ["data: " + json.dumps(o, separators=(",", ":")) for o in objs]
    return json.dumps({"events": lines + (["data: [DONE]"] if done else [])})


def _stored(message, code=400, rid="devshard-1-1"):
    return _events({"error": {"code": code, "message": message, "type": "BadRequestError"}, "id": rid})


# ----------------------------------------------------------------------------- table


def test_table_is_broad():
    families = {r["expect"].get("family") for r in MESSAGE_ROWS}
    assert {"1", "2", "3", "4", "5", "5c", "6", "6c", "7", "7c", "openai", "legacy", "max_tokens", "generic",
            "window", "tool_choice"} <= families
    assert len(MESSAGE_ROWS) >= 75 and len(PAYLOAD_ROWS) >= 35


@pytest.mark.parametrize("row", MESSAGE_ROWS, ids=[r["id"] for r in MESSAGE_ROWS])
def test_wording_table_messages(row):
    got = dataclasses.asdict(parse_error_message(row["message"]))
    assert got == _defaults(MESSAGE_FIELDS, row["expect"])


@pytest.mark.parametrize("row", MESSAGE_ROWS, ids=[r["id"] for r in MESSAGE_ROWS])
def test_wording_table_messages_in_stored_envelope(row):
    text = parse_error_message(row["message"])
    got = parse_response_payload(_stored(row["message"]))
    assert got.is_client_fault and got.is_terminal_error
    assert got.refusal_kind == ("context_length" if text.is_context_length else "other_client_fault")
    assert got.message == row["message"]
    assert got.error_code == 400 and got.error_type == "BadRequestError"
    for name in REPORTED_FIELDS:  # the numbers the text states, carried into the payload parse
        assert getattr(got, name) == getattr(text, name), name


ENVELOPE_ROWS = [r for r in MESSAGE_ROWS if "envelope" in r]


def _as_released(envelope, message):
    """The body a release sent the message in (see the table's _doc), and the code it carries."""
    if envelope == "flat_null":  # vLLM 0.1-0.2: ErrorResponse.code Optional[str] = None
        return {"object": "error", "message": message, "type": "invalid_request_error", "param": None, "code": None}, None
    if envelope == "flat":  # vLLM 0.3-0.10.0
        return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}, 400
    if envelope == "nested":  # vLLM 0.10.1+
        return {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}, 400
    code = None if envelope == "openai_null" else "context_length_exceeded"
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}, None


@pytest.mark.parametrize("row", ENVELOPE_ROWS, ids=[r["id"] for r in ENVELOPE_ROWS])
@pytest.mark.parametrize("stored", [False, True], ids=["bare", "events"])
def test_wording_table_in_released_envelope(row, stored):
    body, code = _as_released(row["envelope"], row["message"])
    got = parse_response_payload(_events(body) if stored else json.dumps(body))
    is_cl = row["expect"].get("is_context_length", False) or row["envelope"] == "openai_cl"
    client = code == 400  # the chain's IsClientFaultError: a null or word code (flat_null, openai_*) is not one
    assert got.refusal_kind == (("context_length" if is_cl else "other_client_fault") if client else "not_client_fault")
    assert got.is_client_fault == client and got.is_terminal_error == stored and got.error_code == code
    assert (got.reported_limit, got.reported_prompt_tokens, got.reported_max_tokens) == tuple(
        row["expect"].get(k) for k in ("reported_limit", "reported_prompt_tokens", "reported_max_tokens"))


def test_every_table_row_names_its_source():
    assert all(r.get("source") for r in ROWS)
    assert len({r["id"] for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", PAYLOAD_ROWS, ids=[r["id"] for r in PAYLOAD_ROWS])
def test_wording_table_payloads(row):
    got = dataclasses.asdict(parse_response_payload(row["payload"]))
    assert got == _defaults(REFUSAL_FIELDS, row["expect"])


TEXT_ROWS = [r for r in PAYLOAD_ROWS if r["payload"] is not None]  # a null payload has no bytes form


@pytest.mark.parametrize("row", TEXT_ROWS, ids=[r["id"] for r in TEXT_ROWS])
def test_payload_bytes_equal_str(row):
    assert parse_response_payload(row["payload"].encode("utf-8")) == parse_response_payload(row["payload"])


# ----------------------------------------------------------------------------- §6.4 and F6

DOC_EXAMPLES = {
    1: ('{"object":"error","message":"This model\'s maximum context length is 180000 tokens. However, you '
        'requested 183500 tokens in the messages, Please reduce the length of the messages.","type":'
        '"BadRequestError","param":null,"code":400}',
        dict(family="1", reported_limit=180000, reported_prompt_tokens=183500, reported_max_tokens=None,
             reported_prompt_is_lower_bound=False)),
    2: ("This model's maximum context length is 180000 tokens. However, you requested 182048 tokens (178976 in "
        "the messages, 3072 in the completion). Please reduce the length of the messages or completion.",
        dict(family="2", reported_limit=180000, reported_prompt_tokens=178976, reported_max_tokens=3072,
             requested_total=182048, reported_prompt_is_lower_bound=False)),
    3: ("This model's maximum context length is 400000 tokens. However, your request has 401234 input tokens. "
        "Please reduce the length of the input messages.",
        dict(family="3", reported_limit=400000, reported_prompt_tokens=401234, reported_max_tokens=None)),
    4: ('{"error":{"message":"\'max_tokens\' or \'max_completion_tokens\' is too large: 4096. This model\'s '
        'maximum context length is 400000 tokens and your request has 397000 input tokens (4096 > 400000 - '
        '397000). None","type":"BadRequestError","param":null,"code":400}}',
        dict(family="4", reported_limit=400000, reported_prompt_tokens=397000, reported_max_tokens=4096,
             requested_total=401096, suffix_parameter=None)),
    5: ("You passed 396929 input tokens and requested 3072 output tokens. However, the model's context length is "
        "only 400000 tokens, resulting in a maximum input length of 396928 tokens. Please reduce the length of "
        "the input prompt. (parameter=input_tokens, value=396929)",
        dict(family="5", reported_limit=400000, reported_prompt_tokens=396929, reported_max_tokens=3072,
             reported_prompt_is_lower_bound=True, suffix_parameter="input_tokens", suffix_value=396929)),
    6: ("This model's maximum context length is 400000 tokens. However, you requested 3072 output tokens and "
        "your prompt contains at least 396929 input tokens, for a total of at least 400001 tokens. Please reduce "
        "the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, "
        "value=396929)",
        dict(family="6", reported_limit=400000, reported_prompt_tokens=396929, reported_max_tokens=3072,
             requested_total=400001, reported_prompt_is_lower_bound=True, suffix_value=396929)),
}


@pytest.mark.parametrize("n", sorted(DOC_EXAMPLES))
def test_doc_examples(n):
    text, expect = DOC_EXAMPLES[n]
    got = parse_response_payload(text) if text.startswith("{") else parse_error_message(text)
    for name, value in expect.items():
        assert getattr(got, name) == value, name
    if text.startswith("{"):
        assert got.refusal_kind == "context_length" and got.is_client_fault and got.error_code == 400
        assert not got.is_terminal_error  # bare bodies are out of IsTerminalErrorResponse's scope
        assert got.message.endswith(" None") == (n == 4)  # suffixes intact in the message


def test_fixture_f6_payload():
    payload = (
        '{"events":["data: {\\"error\\":{\\"code\\":400,\\"message\\":\\"This model\'s maximum context length '
        'is 400000 tokens. However, you requested 4096 output tokens and your prompt contains at least 395905 '
        'input tokens, for a total of at least 400001 tokens.\\",\\"type\\":\\"BadRequestError\\"},\\"id\\":'
        '\\"devshard-1971-6149\\"}","data: [DONE]"]}'
    )
    got = parse_response_payload(payload)
    assert got.refusal_kind == "context_length"
    assert got.is_client_fault and got.is_terminal_error
    assert (got.error_code, got.reported_limit, got.requested_total) == (400, 400000, 400001)
    assert got.reported_prompt_tokens == 395905 == 400000 - 4096 + 1
    assert got.reported_prompt_is_lower_bound and got.reported_max_tokens == 4096 and got.family == "6"


# ----------------------------------------------------------------------------- envelopes

F3 = ("This model's maximum context length is 8192 tokens. However, your request has 9000 input tokens. "
      "Please reduce the length of the input messages.")


@pytest.mark.parametrize("payload,kind,client,terminal", [
    (json.dumps({"error": {"message": F3, "type": "BadRequestError", "param": None, "code": 400}}),
     "context_length", True, False),
    (json.dumps({"object": "error", "message": F3, "type": "BadRequestError", "param": None, "code": 400}),
     "context_length", True, False),
    (_events({"error": {"code": 400, "message": F3, "type": "BadRequestError"}, "id": "devshard-9-9"}),
     "context_length", True, True),
    (_events({"object": "error", "message": F3, "type": "BadRequestError", "code": 400}), "context_length", True, True),
    (_events({"error": {"code": "422", "message": F3, "type": "BadRequestError"}}), "context_length", True, True),
    (_events({"error": {"code": " 400 ", "message": F3}}), "context_length", True, True),
    (_events({"error": {"code": 400, "message": F3}}, done=False), "context_length", True, True),
    (_events({"error": {"code": "bad", "message": F3}}), "not_client_fault", False, True),
    (_events({"error": {"code": None, "message": F3}}), "not_client_fault", False, True),
    (_events({"error": {"code": True, "message": F3}}), "not_client_fault", False, True),
    (_events({"error": {"code": 401, "message": F3}}), "not_client_fault", False, True),
    (_events({"error": {"code": 503, "message": "Service Unavailable"}}), "not_client_fault", False, True),
    (_events({"choices": [{"text": "x"}]}, {"error": {"code": 400, "message": F3}}), "not_client_fault", False, True),
    (_events({"choices": [{"delta": {"tool_calls": [{"id": "t"}]}}]}, {"error": {"code": 400, "message": F3}}),
     "not_client_fault", False, True),
    (_events({"choices": [{"delta": {"content": ""}}], "usage": {"completion_tokens": 0}},
             {"error": {"code": 400, "message": F3}}), "context_length", True, True),
    (_events({"choices": [{"delta": {"content": "hi"}}]}), "not_client_fault", False, False),
    (_events({"error": {"code": 400, "message": F3}}).replace("[DONE]", "[DONE"), "not_client_fault", False, True),
    # a data line that is JSON but not an object fails chunkCarriesOutput's decode: output, so not a client fault
    (json.dumps({"events": ["data: 42", "data: {\"error\":{\"code\":400,\"message\":\"x\"}}"]}),
     "not_client_fault", False, True),
    (json.dumps({"events": "data: [DONE]"}), "not_client_fault", False, False),
    (json.dumps({"events": [1, 2]}), "not_client_fault", False, False),
    (json.dumps([{"error": {"code": 400, "message": F3}}]), "not_client_fault", False, False),
    (json.dumps({"error": {"code": 400, "message": F3}, "choices": [{"message": {"content": "x"}}]}),
     "not_client_fault", False, False),
    (json.dumps({"error": "plain string error"}), "not_client_fault", False, False),
    ("data: " + json.dumps({"error": {"code": 400, "message": F3}}) + "\n\ndata: [DONE]\n",
     "not_client_fault", False, False),
])
def test_envelopes(payload, kind, client, terminal):
    got = parse_response_payload(payload)
    assert (got.refusal_kind, got.is_client_fault, got.is_terminal_error) == (kind, client, terminal)


E400 = {"error": {"code": 400, "message": F3, "type": "BadRequestError"}}


@pytest.mark.parametrize("events, client, terminal", [
    # chunkCarriesOutput: what counts as output besides text and content
    ([{"choices": [{"logprobs": {"content": [{"token": "a"}]}}]}, E400], False, True),
    ([{"choices": [{"logprobs": {"content": []}}]}, E400], True, True),
    ([{"choices": [{"delta": {"refusal": "no"}}]}, E400], False, True),
    ([{"choices": [{"message": {"function_call": {}}}]}, E400], False, True),
    ([{"choices": [{"message": {"function_call": None}}]}, E400], True, True),
    ([{"choices": [{"delta": {"role": "assistant", "content": None}}]}, E400], True, True),
    # a field of the wrong type fails the decode: the chunk carries output (fail closed)
    ([{"choices": "x"}, E400], False, True),
    ([{"choices": [{"text": 5}]}, E400], False, True),
    ([{"usage": {"completion_tokens": -1}}, E400], False, True),
    ([{"usage": {"completion_tokens": 1.0}}, E400], False, True),
    ([{"usage": {"completion_tokens": 0}}, E400], True, True),
    # keys match case-insensitively, the last one winning
    ([{"Choices": [{"Text": "x"}]}, E400], False, True),
    ([{"ERROR": {"code": 400, "message": F3}}], True, True),
    # codes print through float64: 400.0 and 4e2 are "400"; a word, null or 400.5 are not client faults
    ([{"error": {"code": 400.0, "message": F3}}], True, True),
    ([{"error": {"code": 4e2, "message": F3}}], True, True),
    ([{"error": {"code": 400.5, "message": F3}}], False, True),
    ([{"error": {"code": "context_length_exceeded", "message": F3}}], False, True),
    # an error event the decoder cannot read is no error event
    ([{"error": "plain string"}], False, False),
    ([{"error": {"code": 400, "message": 5}}], False, False),
    ([{"object": "error", "code": 400}], False, False),             # the flat form needs a message
    ([{"object": "error", "message": F3, "code": 400, "type": 7}], False, False),
])
def test_the_chains_predicates_decide(events, client, terminal):
    """IsClientFaultErrorResponse / IsTerminalErrorResponse as common/completionapi/terminal_error.go decides them."""
    got = parse_response_payload(_events(*events))
    assert (got.is_client_fault, got.is_terminal_error) == (client, terminal)


@pytest.mark.parametrize("event, client, terminal", [
    ("event: error\ndata: " + json.dumps(E400), False, False),    # one event is one line: not a data line
    ("  data:" + json.dumps(E400) + "  ", True, True),             # trimmed; no space needed after the prefix
    ("data: " + json.dumps(E400) + "\ndata: [DONE]", False, True),  # the rest of the event is the JSON: invalid
    ("data: {\"x\": NaN}", False, True),                          # json.Valid refuses NaN: unparseable data
])
def test_event_lines_as_go_reads_them(event, client, terminal):
    got = parse_response_payload(json.dumps({"events": [event]}))
    assert (got.is_client_fault, got.is_terminal_error) == (client, terminal)


def test_context_numbers_survive_in_non_client_fault():
    got = parse_response_payload(_events({"choices": [{"delta": {"content": "partial"}}]},
                                         {"error": {"code": 400, "message": F3}}))
    assert got.refusal_kind == "not_client_fault" and got.family == "3"
    assert (got.reported_limit, got.reported_prompt_tokens) == (8192, 9000)


def test_first_context_error_is_reported():
    got = parse_response_payload(_events({"error": {"code": 400, "message": "bad tool"}},
                                         {"error": {"code": 400, "message": F3, "type": "T"}}))
    assert got.refusal_kind == "context_length" and got.message == F3 and got.error_type == "T"


def test_windows_line_endings_and_bom():
    line = "data: " + json.dumps({"error": {"code": 400, "message": F3}}) + "\r\n"
    payload = "\ufeff" + json.dumps({"events": [line]})
    assert parse_response_payload(payload).refusal_kind == "context_length"
    assert parse_response_payload(payload.encode("utf-8")).refusal_kind == "context_length"


def test_u2028_inside_json_string_is_not_a_line_break():
    payload = _events({"error": {"code": 400, "message": F3 + "\u2028tail"}})
    got = parse_response_payload(payload)
    assert got.refusal_kind == "context_length" and got.message.endswith("\u2028tail")


@pytest.mark.parametrize("payload", [
    "{" * 200_000, "[" * 200_000, '{"events":[' * 50_000, b"\xff\xfe\x00\x01binary\x80",
    '{"error":{"code":' + "9" * 10_000 + ',"message":"x"}}',
    '{"events":["data: {\\"error\\":{\\"code\\":' + "4" * 5000 + '}}"]}',
    "x" * 2_000_000, " " * 1_000_000 + "(value=1)", "(" * 100_000 + "value=" + ")" * 100_000,
    "This model's maximum context length is " + "9" * 100_000 + " tokens.",
    json.dumps({"error": {"code": 400, "message": "a" + " " * 300_000 + "b (parameter=x, value=1)"}}),
])
def test_junk_never_raises(payload):
    got = parse_response_payload(payload)
    assert got.refusal_kind in ("not_client_fault", "other_client_fault", "context_length")
    assert got.reported_limit is None or got.reported_limit <= INT63_MAX


def test_bad_types_and_empty():
    assert parse_response_payload(None).refusal_kind == "unknown"
    assert parse_response_payload(b"").refusal_kind == "unknown"
    assert parse_response_payload(bytearray(b"  ")).refusal_kind == "unknown"
    assert parse_error_message("") == MessageParse()
    assert parse_error_message(None) == MessageParse()  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- hypothesis


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.binary()))
def test_never_raises_on_arbitrary_input(payload):
    got = parse_response_payload(payload)
    assert isinstance(got, RefusalParse)
    assert got.refusal_kind in ("unknown", "not_client_fault", "other_client_fault", "context_length")
    if isinstance(payload, str):
        parse_error_message(payload)


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                       st.floats(allow_nan=False), st.text(max_size=30))
_json = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(
        ["error", "object", "code", "message", "type", "choices", "delta", "content", "usage",
         "completion_tokens", "text", "events", "id"]), inner, max_size=5)), max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(_json, st.booleans())
def test_never_raises_on_arbitrary_json(doc, as_events):
    payload = json.dumps({"events": ["data: " + json.dumps(doc), "data: [DONE]"]}) if as_events else json.dumps(doc)
    assert isinstance(parse_response_payload(payload), RefusalParse)


def _family_text(fam, L, M, P, C, at_least):
    al = "at least " if at_least else ""
    head = f"This model's maximum context length is {L} tokens."
    return {
        "1": f"{head} However, you requested {P} tokens in the messages, Please reduce the length of the messages.",
        "2": f"{head} However, you requested {P + M} tokens ({P} in the messages, {M} in the completion). "
             "Please reduce the length of the messages or completion.",
        "3": f"{head} However, your request has {P} input tokens. Please reduce the length of the input messages.",
        "4": f"'max_tokens' or 'max_completion_tokens' is too large: {M}. This model's maximum context length is "
             f"{L} tokens and your request has {P} input tokens ({M} > {L} - {P}).",
        "5": f"You passed {P} input tokens and requested {M} output tokens. However, the model's context length is "
             f"only {L} tokens, resulting in a maximum input length of {L - M} tokens. Please reduce the length of "
             "the input prompt.",
        "5c": f"You passed {C} input characters and requested {M} output tokens. However, the model's context "
              f"length is only {L} tokens, resulting in a maximum input length of {L - M} tokens (at most "
              f"{(L - M) * 4} characters). Please reduce the length of the input prompt.",
        "6": f"{head} However, you requested {M} output tokens and your prompt contains {al}{P} input tokens, for a "
             f"total of {al}{P + M} tokens. Please reduce the length of the input prompt or the number of requested "
             "output tokens.",
        "6c": f"{head} However, you requested {M} output tokens and your prompt contains {C} characters (more than "
              f"{(L - M) * 4} characters, which is the upper bound for {L - M} input tokens). Please reduce the "
              "length of the input prompt or the number of requested output tokens.",
    }[fam]


_SUFFIXES = st.sampled_from(["", " None", " (parameter=input_tokens, value={P})", " (value={P})",
                             " (parameter=input_tokens, value={P}) None", " (parameter=input_text, value={C})"])
_ENVELOPES = st.sampled_from(["message", "events_nested", "events_flat", "bare_nested", "bare_flat", "text"])


@settings(max_examples=600, deadline=None)
@given(
    fam=st.sampled_from(["1", "2", "3", "4", "5", "5c", "6", "6c"]),
    L=st.integers(min_value=1, max_value=10**9),
    M=st.integers(min_value=0, max_value=10**9),
    P=st.integers(min_value=0, max_value=10**9),
    C=st.integers(min_value=0, max_value=10**12),
    artefact=st.booleans(),
    at_least=st.booleans(),
    suffix=_SUFFIXES,
    envelope=_ENVELOPES,
    code=st.sampled_from([400, 422, "400"]),
)
def test_round_trip(fam, L, M, P, C, artefact, at_least, suffix, envelope, code):
    if fam in ("5", "6") and artefact and L - M + 1 >= 0:
        P = L - M + 1  # the truncation artefact of §6.3
    at_least = at_least and fam == "6"
    msg = _family_text(fam, L, M, P, C, at_least) + suffix.format(P=P, C=C)
    err = {"code": code, "message": msg, "type": "BadRequestError"}
    payload = {
        "message": None,
        "events_nested": _events({"error": err, "id": "devshard-1-2"}),
        "events_flat": _events({"object": "error", **err}),
        "bare_nested": json.dumps({"error": err}),
        "bare_flat": json.dumps({"object": "error", **err}),
        "text": msg,
    }[envelope]
    got = parse_error_message(msg) if payload is None else parse_response_payload(payload)
    if payload is not None:
        want_kind = "not_client_fault" if envelope == "text" else "context_length"
        assert got.refusal_kind == want_kind
        assert got.is_terminal_error == envelope.startswith("events")
        assert got.error_code == (None if envelope == "text" else 400 if code == "400" else code)
    else:
        assert got.is_context_length
    assert got.family == fam
    assert got.reported_limit == L
    chars_family = fam.endswith("c")
    has_m = fam not in ("1", "3")
    assert got.reported_max_tokens == (M if has_m else None)
    if chars_family:
        assert got.reported_prompt_tokens is None and got.requested_total is None
        assert got.reported_prompt_chars == C and not got.reported_prompt_is_lower_bound
    else:
        assert got.reported_prompt_tokens == P and got.reported_prompt_chars is None
        assert got.requested_total == (P + M if has_m else P)
        lower = at_least or (fam in ("5", "6") and P == L - M + 1)
        assert got.reported_prompt_is_lower_bound == lower
    if "value=" in suffix:
        assert got.suffix_value == (C if "input_text" in suffix else P)
        assert got.suffix_parameter == ("input_text" if "input_text" in suffix else
                                        "input_tokens" if "parameter" in suffix else None)
    else:
        assert got.suffix_value is None and got.suffix_parameter is None


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**30), st.integers(min_value=0, max_value=10**30))
def test_huge_numbers_cap(L, P):
    text = f"This model's maximum context length is {L} tokens. However, your request has {P} input tokens."
    got = parse_error_message(text)
    assert got.is_context_length and got.family == "3"
    assert got.reported_limit == (L if L <= INT63_MAX else None)
    assert got.reported_prompt_tokens == (P if P <= INT63_MAX else None)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=INT63_MAX), st.integers(min_value=0, max_value=INT63_MAX))
def test_a_computed_total_past_63_bits_is_no_signal_as_a_stated_one(P, M):
    # rules.refusal_parse.requested_total is a bigint: P + M past it had failed the load's COPY (one refusal line
    # stopped the whole file)
    for text in (f"You passed {P} input tokens and requested {M} output tokens. However, the model's context length "
                 f"is only 100 tokens, resulting in a maximum input length of 1 tokens.",
                 f"This model's maximum context length is 100 tokens. However, you requested {M} output tokens and "
                 f"your prompt contains at least {P} input tokens."):
        got = parse_error_message(text)
        assert (got.reported_prompt_tokens, got.reported_max_tokens) == (P, M)
        assert got.requested_total == (P + M if P + M <= INT63_MAX else None)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("Kk\u212a"), min_size=6, max_size=6))
def test_case_folding_of_k(ks):
    text = f"This model's maximum context length is 100 to{ks[0]}ens. However, your request has 200 input to{ks[1]}ens."
    got = parse_error_message(text.upper() if ks[2] == "K" else text)
    assert (got.family, got.reported_limit, got.reported_prompt_tokens) == ("3", 100, 200)


# -- the parse's shortcuts give what the plain formulas give -----------------------------------------------------------
_SPACES_AND_APOSTROPHES = st.text(st.sampled_from(
    [" ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x85", "\xa0", "\u2000", "\u2028", "\u3000", "`", "'",
     "\u2018", "\u2019", "\u02bc", "\u0149", "\u212a", "a", "B", "0", ".", "(", "é"]), max_size=40)


@settings(max_examples=500, deadline=None)
@given(st.one_of(_SPACES_AND_APOSTROPHES, st.text(max_size=40)))
def test_fold_equals_the_plain_formula(text):
    # _fold skips the translation and the white space substitution when they cannot change the text
    from indexer.refusals.messages import _APOSTROPHES, _WS, _fold
    assert _fold(text) == _WS.sub(" ", text.casefold().translate(_APOSTROPHES))


def test_the_facts_fold_relies_on():
    import re
    import sys

    from indexer.refusals.messages import _APOSTROPHE_CHARS
    white = [c for c in map(chr, range(sys.maxunicode + 1)) if re.fullmatch(r"\s", c)]
    assert [c for c in white if c.isprintable()] == [" "]  # every other white space character is unprintable
    assert [c for c in _APOSTROPHE_CHARS if c.isascii()] == ["`"]


_json_text = st.one_of(
    st.text(max_size=30),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                 max_leaves=8).map(json.dumps),
    st.sampled_from(["\ufeff{}", "NaN", "[Infinity]", "-Infinity", " 1 ", "1 x", '"\\ud800"', "{\"a\":1,\"a\":2}"]))


@settings(max_examples=400, deadline=None)
@given(st.one_of(_json_text, _json_text.map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_one_decoder_reads_as_json_loads(text):
    # consensus.json_loads keeps one decoder instead of json.loads building one per call: same value, same error
    from indexer.refusals import consensus, vllm

    def outcome(fn):
        try:
            return "value", repr(fn())
        except (ValueError, RecursionError) as exc:
            return "error", type(exc).__name__, str(exc)

    for decoder in (consensus._DECODER, vllm._DECODER):
        options = dict(parse_int=decoder.parse_int, parse_constant=decoder.parse_constant)
        assert outcome(lambda: consensus.json_loads(text, decoder)) == outcome(lambda: json.loads(text, **options))


_keys = st.text(st.sampled_from(["e", "E", "r", "o", "k", "K", "\u212a", "s", "S", "\u017f", "_"]), max_size=4) | \
    st.sampled_from(["error", "Error", "ERROR", "code", "Code", "message", "MESSAGE", "type", "object", "choices"])


@given(st.lists(st.tuples(_keys, st.integers()), max_size=8),
       st.sampled_from(["error", "code", "message", "type", "object", "choices", "usage", "k", "s", "ss"]))
def test_fields_reads_as_gos_decoder(pairs, name):
    # the value of the last key equal to the tag, exactly or case-insensitively (the loop this replaced)
    from indexer.refusals.consensus import field
    obj = dict(pairs)
    want = None
    for key, item in obj.items():
        if key == name or key.casefold() == name:
            want = item
    assert field(obj, name) == want

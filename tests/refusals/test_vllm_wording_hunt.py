"""Real vLLM refusal texts (each with the file and commit it was read at) and hostile variants of them, run
through the message parser: the numbers it must extract, and the texts it must not read as a context-length
refusal. Unknown stays None; nothing is guessed. The broad per-release survey is tests/cases/data/vllm_wordings.json;
this table adds the texts and corner cases found since (the encoder prompt, the bare total, "at least" in a later
sentence, a text naming another refusal beside the limit, separators, signs, huge numbers, truncation, lookalikes).
"""
from __future__ import annotations

import dataclasses
import json
import random

import pytest

from indexer.devnet.models import VLLM_STYLES
from indexer.devnet.payloads import refusal_message
from indexer.refusals.messages import MessageParse, parse_error_message
from indexer.refusals.vllm import parse_response_payload

VLLM = "vllm-project/vllm"
GONKA_VLLM = "gonka-ai/vllm"
P_IN = "vllm/v1/engine/input_processor.py@009daaeebfb0ce2813f970f2173ea9c8eee09092 _validate_prompt_len"
RENDER = "vllm/renderers/params.py@1aa021e827032484a7f89194c7e528fc40655204"
SERVING = "vllm/entrypoints/openai/engine/serving.py@021a1c45f41d8709179290ae7a9998364a0b56a7 _validate_input"
OLD_RENDER = "vllm/entrypoints/renderer.py@09b5e071385d566ae62637708a8197f86196c257"
MM_NOTE = ("Make sure that `max_model_len` is no smaller than the number of text tokens plus multimodal tokens. "
           "For image inputs, the number of image tokens depends on the number of images, and possibly their "
           "aspect ratios as well.")
F3 = ("This model's maximum context length is {L} tokens. However, your request has {P} input tokens. "
      "Please reduce the length of the input messages.")

# (id, source, message, expected non-default MessageParse fields); {} means: not a context-length refusal, no numbers
ROWS = [
    # --- real texts, as the cited source prints them
    ("encoder_prompt_over_cache", f"{VLLM} {P_IN} (prompt_type encoder: the limit is the encoder cache size)",
     f"The encoder prompt (length 5000) is longer than the maximum model length of 4096. {MM_NOTE}",
     {"is_context_length": True, "family": "encoder"}),
    ("encoder_prompt_plus_one", f"{VLLM} {P_IN} (prompt_len == limit, runner generate)",
     "The encoder prompt (length 4096) plus the number of requested output tokens (at least 1) is longer than the "
     "maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens "
     "(prompt + requested output tokens).",
     {"is_context_length": True, "family": "encoder"}),
    ("decoder_prompt", f"{VLLM} {P_IN} (prompt_type decoder: the limit is max_model_len)",
     f"The decoder prompt (length 12324) is longer than the maximum model length of 8192. {MM_NOTE}",
     {"is_context_length": True, "family": "legacy", "reported_limit": 8192, "reported_prompt_tokens": 12324,
      "requested_total": 12324}),
    ("decoder_prompt_plus_one", f"{VLLM} {P_IN}",
     "The decoder prompt (length 32768) plus the number of requested output tokens (at least 1) is longer than the "
     "maximum model length of 32768. Make sure that `max_model_len` is no smaller than the number of text tokens "
     "(prompt + requested output tokens).",
     {"is_context_length": True, "family": "legacy", "reported_limit": 32768, "reported_prompt_tokens": 32768,
      "requested_total": 32768}),
    ("mm_item_over_encoder_cache", f"{VLLM} {P_IN.replace('_validate_prompt_len', '_validate_model_input')}",
     "The decoder prompt contains a(n) image item with 16384 embedding tokens, which exceeds the pre-allocated "
     "encoder cache size 8192. Please reduce the input size or increase the encoder cache size by setting "
     "--limit-mm-per-prompt at startup.", {}),
    ("decoder_prompt_empty", f"{VLLM} {P_IN}", "The decoder prompt cannot be empty", {}),
    ("token_out_of_vocab", f"{VLLM} {P_IN.replace('_validate_prompt_len', '_validate_model_input')}",
     "Token id 200000 is out of vocabulary", {}),
    ("gonka_f3", f"{GONKA_VLLM} {SERVING}", F3.format(L=32768, P=40000) + " (parameter=input_tokens, value=40000)",
     {"is_context_length": True, "family": "3", "reported_limit": 32768, "reported_prompt_tokens": 40000,
      "requested_total": 40000, "suffix_parameter": "input_tokens", "suffix_value": 40000}),
    ("gonka_f4", f"{GONKA_VLLM} {SERVING}",
     "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum context length is 32768 "
     "tokens and your request has 30000 input tokens (4096 > 32768 - 30000). (parameter=max_tokens, value=4096)",
     {"is_context_length": True, "family": "4", "reported_limit": 32768, "reported_prompt_tokens": 30000,
      "reported_max_tokens": 4096, "requested_total": 34096, "suffix_parameter": "max_tokens",
      "suffix_value": 4096}),
    ("gonka_f1_score", f"{GONKA_VLLM} {SERVING}",
     "This model's maximum context length is 512 tokens. However, you requested 530 tokens in the input for score. "
     "Please reduce the length of the input. (parameter=input_tokens, value=530)",
     {"is_context_length": True, "family": "1", "reported_limit": 512, "reported_prompt_tokens": 530,
      "requested_total": 530, "suffix_parameter": "input_tokens", "suffix_value": 530}),
    ("f4_zero_prompt", f"{GONKA_VLLM} {SERVING} (an empty prompt with max_tokens at the limit + 1)",
     "'max_tokens' or 'max_completion_tokens' is too large: 4097. This model's maximum context length is 4096 "
     "tokens and your request has 0 input tokens (4097 > 4096 - 0).",
     {"is_context_length": True, "family": "4", "reported_limit": 4096, "reported_prompt_tokens": 0,
      "reported_max_tokens": 4097, "requested_total": 4097}),
    ("renderer_f3", f"{VLLM} {OLD_RENDER} _create_tokens_prompt", F3.format(L=8192, P=9000),
     {"is_context_length": True, "family": "3", "reported_limit": 8192, "reported_prompt_tokens": 9000,
      "requested_total": 9000}),
    ("renderer_truncate_size", f"{VLLM} {OLD_RENDER} _validate_and_normalize_truncate_tokens",
     "truncate_prompt_tokens (10000) cannot be greater than max_length (8192). Please select a smaller truncation "
     "size.", {}),
    ("params_truncate_size", f"{VLLM} {RENDER} TokenizeParams.__post_init__",
     "truncate_prompt_tokens=10000 cannot be greater than max_total_tokens - max_output_tokens = 8192. Please "
     "request a smaller truncation size. (parameter=truncate_prompt_tokens, value=10000)",
     {"suffix_parameter": "truncate_prompt_tokens", "suffix_value": 10000}),
    ("params_max_output_tokens", f"{VLLM} {RENDER} TokenizeParams.__post_init__ (default parameter names)",
     "max_output_tokens=5000cannot be greater than max_total_tokens=max_total_tokens=4096. Please request fewer "
     "output tokens. (parameter=max_output_tokens, value=5000)",
     {"is_context_length": True, "family": "max_tokens", "reported_limit": 4096, "reported_max_tokens": 5000,
      "suffix_parameter": "max_output_tokens", "suffix_value": 5000}),
    ("params_f5_empty_budget", f"{VLLM} {RENDER} _token_len_check (max_tokens == limit: truncation at 1 token)",
     "You passed 1 input tokens and requested 32768 output tokens. However, the model's context length is only "
     "32768 tokens, resulting in a maximum input length of 0 tokens. Please reduce the length of the input prompt. "
     "(parameter=input_tokens, value=1)",
     {"is_context_length": True, "family": "5", "reported_limit": 32768, "reported_prompt_tokens": 1,
      "reported_prompt_is_lower_bound": True, "reported_max_tokens": 32768, "requested_total": 32769,
      "suffix_parameter": "input_tokens", "suffix_value": 1}),
    ("params_f5c", f"{VLLM} {RENDER} _text_len_check",
     "You passed 20000 input characters and requested 100 output tokens. However, the model's context length is "
     "only 4096 tokens, resulting in a maximum input length of 3996 tokens (at most 15984 characters). Please "
     "reduce the length of the input prompt. (parameter=input_text, value=20000)",
     {"is_context_length": True, "family": "5c", "reported_limit": 4096, "reported_max_tokens": 100,
      "reported_prompt_chars": 20000, "suffix_parameter": "input_text", "suffix_value": 20000}),
    ("sampling_max_tokens_zero", f"{VLLM} vllm/sampling_params.py _verify_args",
     "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
     {"suffix_parameter": "max_tokens", "suffix_value": 0}),
    ("params_truncate_size_renamed", f"{VLLM} {RENDER} TokenizeParams.__post_init__ (chat parameter names)",
     "truncate_prompt_tokens=10000 cannot be greater than max_model_len - max_tokens = 8192. Please request a "
     "smaller truncation size. (parameter=truncate_prompt_tokens, value=10000)",
     {"suffix_parameter": "truncate_prompt_tokens", "suffix_value": 10000}),
    ("field_f6_8193", "family 6 as quoted from a production vLLM 400 in a public gateway's notes (L 8192, M 100)",
     "This model's maximum context length is 8192 tokens. However, you requested 100 output tokens and your prompt "
     "contains at least 8093 input tokens, for a total of at least 8193 tokens. Please reduce the length of the "
     "input prompt or the number of requested output tokens.",
     {"is_context_length": True, "family": "6", "reported_limit": 8192, "reported_prompt_tokens": 8093,
      "reported_prompt_is_lower_bound": True, "reported_max_tokens": 100, "requested_total": 8193}),
    ("field_f6_zero_output", "family 6 with max_tokens 0 (quoted in a public project: 'you requested 0 output "
     "tokens and your prompt contains 131073 input tokens'): the truncation count L + 1",
     "This model's maximum context length is 131072 tokens. However, you requested 0 output tokens and your prompt "
     "contains 131073 input tokens, for a total of 131073 tokens.",
     {"is_context_length": True, "family": "6", "reported_limit": 131072, "reported_prompt_tokens": 131073,
      "reported_prompt_is_lower_bound": True, "reported_max_tokens": 0, "requested_total": 131073}),
    ("responses_budget", f"{VLLM} vllm/renderers/response_truncation.py@e39c7d91af0253185501010e8eb6c7e9439a9225 "
     "ResponseTruncationSearch.record (VLLMValidationError parameter input_tokens, no value)",
     "The instructions and latest message (including required tool context) cannot fit in the available input "
     "token budget. Shorten them or reduce max_output_tokens. (parameter=input_tokens)",
     {"is_context_length": True, "family": "budget", "suffix_parameter": "input_tokens"}),
    ("unknown_wording_overflow_parameter", "a wording not known here, with the parameter vLLM's is_context_overflow "
     "(response_truncation.py@e39c7d91) reads as an overflow; its value is kept only as the suffix",
     "Prompt does not fit the model window. (parameter=input_tokens, value=9000)",
     {"is_context_length": True, "family": "parameter", "suffix_parameter": "input_tokens", "suffix_value": 9000}),
    ("unknown_wording_input_text", "as above, input_text",
     "Prompt text too long for the model window. (parameter=input_text, value=900000)",
     {"is_context_length": True, "family": "parameter", "suffix_parameter": "input_text", "suffix_value": 900000}),
    ("plugin_prompt_is_p_tokens", "prime-rl's vLLM plugin (its patched TokenizeParams._token_len_check checks the "
     "prompt alone against max_model_len)",
     "The prompt is 140000 tokens, which exceeds the model's maximum context length of 131072 tokens. Please reduce "
     "the length of the input prompt. (parameter=input_tokens, value=140000)",
     {"is_context_length": True, "family": "legacy", "reported_limit": 131072, "reported_prompt_tokens": 140000,
      "requested_total": 140000, "suffix_parameter": "input_tokens", "suffix_value": 140000}),
    ("plugin_prompt_fills_limit", "a vLLM serving plugin's prompt-only check (found by its wording in public code)",
     "Prompt length (8192) fills or exceeds this model's maximum context length (8192). No room for output tokens. "
     "(parameter=input_tokens, value=8192)",
     {"is_context_length": True, "family": "legacy", "reported_limit": 8192, "reported_prompt_tokens": 8192,
      "requested_total": 8192, "suffix_parameter": "input_tokens", "suffix_value": 8192}),
    # --- "at least" in a later sentence bounds nothing in the wording before it
    ("f3_then_other_at_least", "family 3 (as gonka_f3) followed by another error's sentence",
     F3.format(L=8192, P=9000) + " Also: max_tokens must be at least 1, got 0.",
     {"is_context_length": True, "family": "3", "reported_limit": 8192, "reported_prompt_tokens": 9000,
      "requested_total": 9000}),
    ("f1_then_other_at_least", "family 1 (vllm serving_engine.py 0.4-0.10) followed by a note",
     "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens in the messages, "
     "Please reduce the length of the messages. Requests need at least 1 output token.",
     {"is_context_length": True, "family": "1", "reported_limit": 8192, "reported_prompt_tokens": 9000,
      "requested_total": 9000}),
    ("f3_at_least_in_wording", "family 3 with the bound inside the wording",
     "This model's maximum context length is 8192 tokens. However, your request has at least 8193 input tokens.",
     {"is_context_length": True, "family": "3", "reported_limit": 8192, "reported_prompt_tokens": 8193,
      "reported_prompt_is_lower_bound": True, "requested_total": 8193}),
    ("f2_devshard_tail", "gonka-devshard.md §6.2: devshard tests append the total tail to family 2",
     "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (3000 in the "
     "messages, 2000 in the completion), for a total of at least 5001 tokens.",
     {"is_context_length": True, "family": "2", "reported_limit": 4096, "reported_prompt_tokens": 3000,
      "reported_prompt_is_lower_bound": True, "reported_max_tokens": 2000, "requested_total": 5001}),
    ("f2_then_unrelated_total", "family 2, then a separate sentence naming a total",
     "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (3000 in the "
     "messages, 2000 in the completion). Please reduce the length of the messages or completion. Batches "
     "need a total of at least 9999 tokens.",
     {"is_context_length": True, "family": "2", "reported_limit": 4096, "reported_prompt_tokens": 3000,
      "reported_max_tokens": 2000, "requested_total": 5000}),
    # --- the bare total: the prompt's share is unknown
    ("bare_total", "OpenAI-compatible short form (gateway test strings); not printed by vLLM",
     "This model's maximum context length is 128000 tokens. However, you requested 200000 tokens.",
     {"is_context_length": True, "family": "total", "reported_limit": 128000, "requested_total": 200000}),
    ("f2_cut_after_total", "family 2 (vllm serving_engine.py 0.3-0.10) cut short by a proxy",
     "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
     {"is_context_length": True, "family": "total", "reported_limit": 4096, "requested_total": 5000}),
    ("f2_cut_inside_parenthesis", "family 2 cut inside its parenthesis",
     "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the mess",
     {"is_context_length": True, "family": "generic", "reported_limit": 4096}),
    ("f3_cut_inside_count", "family 3 cut inside the prompt count (40123 -> 4012)",
     "This model's maximum context length is 32768 tokens. However, your request has 4012",
     {"is_context_length": True, "family": "generic", "reported_limit": 32768}),
    # --- a text naming only the limit next to another refusal is not a context-length refusal
    ("rate_limit_with_limit", "rate limit text that also states the limit",
     "Rate limit exceeded: 10000 tokens per minute. This model's maximum context length is 8192 tokens.", {}),
    ("too_many_requests_with_limit", "429 text that also states the limit",
     "Too Many Requests. This model's maximum context length is 8192 tokens.", {}),
    ("lora_with_limit", "LoRA refusal that also states the limit",
     "LoRA rank 64 is greater than max_lora_rank 16; this model's maximum context length is 4096 tokens.", {}),
    ("max_tokens_floor_with_limit", "sampling check that also states the limit",
     "This model's maximum context length is 4096 tokens. max_tokens must be at least 1, got 0.", {}),
    ("empty_prompt_with_limit", "empty prompt refusal that also states the limit",
     "The prompt is empty. This model's maximum context length is 4096 tokens.", {}),
    ("limit_only", "only the limit sentence", "This model's maximum context length is 8192 tokens.",
     {"is_context_length": True, "family": "generic", "reported_limit": 8192}),
    ("f3_names_rate_anyway", "a family-3 wording wins over a marker elsewhere",
     F3.format(L=8192, P=9000) + " Rate limit: 10 requests per minute.",
     {"is_context_length": True, "family": "3", "reported_limit": 8192, "reported_prompt_tokens": 9000,
      "requested_total": 9000}),
    # --- numbers: separators, signs, decimals, lookalikes, huge
    ("grouped_thousands", "strict comma groups read exactly", F3.format(L="400,000", P="401,234"),
     {"is_context_length": True, "family": "3", "reported_limit": 400000, "reported_prompt_tokens": 401234,
      "requested_total": 401234}),
    ("bad_grouping", "'50,00' is no number", F3.format(L=4096, P="50,00"),
     {"is_context_length": True, "family": "generic", "reported_limit": 4096}),
    ("dot_grouping", "'5.000' is no number", F3.format(L=4096, P="5.000"),
     {"is_context_length": True, "family": "generic", "reported_limit": 4096}),
    ("space_grouping", "'5 000' is no number", F3.format(L="4 096", P="5 000"), {}),
    ("negative_prompt", "a sign is no count", F3.format(L=4096, P=-5000),
     {"is_context_length": True, "family": "generic", "reported_limit": 4096}),
    ("negative_limit", "a signed limit states nothing", F3.format(L=-4096, P=5000), {}),
    ("decimal_prompt", "a fraction is no count", F3.format(L=4096, P="5000.5"),
     {"is_context_length": True, "family": "generic", "reported_limit": 4096}),
    ("fullwidth_digits", "U+FF10.. digits are not read", F3.format(L=4096, P="\uff15\uff10\uff10\uff10"),
     {"is_context_length": True, "family": "generic", "reported_limit": 4096}),
    ("zero_width_in_count", "U+200B inside a count", F3.format(L=4096, P="50\u200b00"),
     {"is_context_length": True, "family": "generic", "reported_limit": 4096}),
    ("cyrillic_e", "U+0435 in 'length': not the wording", F3.format(L=4096, P=5000).replace("length", "l\u0435ngth"),
     {}),
    ("prompt_beyond_bigint", "2**70 gives no signal", F3.format(L=4096, P=2**70),
     {"is_context_length": True, "family": "3", "reported_limit": 4096}),
    ("grouped_beyond_bigint", "grouped digits beyond 2**63-1", F3.format(L=4096, P="1,000,000,000,000,000,000,000"),
     {"is_context_length": True, "family": "3", "reported_limit": 4096}),
    ("negative_suffix_value", "a signed suffix value is no count",
     "This model's maximum context length is 4096 tokens. (parameter=input_tokens, value=-7000)",
     {"is_context_length": True, "family": "generic", "reported_limit": 4096, "suffix_parameter": "input_tokens"}),
]


def _expect(expect: dict) -> dict:
    want = dataclasses.asdict(MessageParse())
    unknown = set(expect) - set(want)
    assert not unknown, f"table names unknown fields {unknown}"
    return {**want, **expect}


def test_rows_are_unique_and_cited():
    assert len({r[0] for r in ROWS}) == len(ROWS)
    assert all(r[1] for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_message(row):
    _, _, message, expect = row
    assert dataclasses.asdict(parse_error_message(message)) == _expect(expect)


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_in_the_devshard_envelope(row):
    """The executor's stored body (gonka-devshard.md §2.1): a 400 is a client fault; the kind follows the text."""
    _, _, message, expect = row
    body = {"error": {"code": 400, "message": message, "type": "BadRequestError"}, "id": "devshard-7-7"}
    got = parse_response_payload(json.dumps({"events": ["data: " + json.dumps(body), "data: [DONE]"]}))
    assert got.refusal_kind == ("context_length" if expect.get("is_context_length") else "other_client_fault")
    assert (got.family, got.reported_limit, got.reported_prompt_tokens, got.reported_prompt_is_lower_bound) == (
        expect.get("family"), expect.get("reported_limit"), expect.get("reported_prompt_tokens"),
        expect.get("reported_prompt_is_lower_bound", False))


@pytest.mark.parametrize("status", [400, 422])
def test_bare_http_bodies_of_both_client_statuses(status):
    """vLLM's HTTP error body, flat (<= 0.10.0) and nested (0.10.1+), outside the envelope: never terminal."""
    message = F3.format(L=8192, P=9000)
    for body in ({"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status},
                 {"error": {"message": message, "type": "BadRequestError", "param": "input_tokens", "code": status}}):
        got = parse_response_payload(json.dumps(body))
        assert (got.refusal_kind, got.is_client_fault, got.is_terminal_error, got.error_code) == (
            "context_length", True, False, status)
        assert (got.reported_limit, got.reported_prompt_tokens) == (8192, 9000)


@pytest.mark.parametrize("style", VLLM_STYLES)
def test_devnet_refusals_read_as_they_were_written(style):
    """The simulated executors' texts (indexer.devnet.payloads) read back to the numbers they were made from."""
    rng = random.Random(7)
    for limit, prompt, max_tokens in ((8192, 9000, 100), (8192, 8100, 100), (400000, 399000, 4096), (4096, 4096, 1)):
        made = refusal_message(style, limit, prompt, max_tokens, rng)
        got = parse_error_message(made.message)
        assert (got.is_context_length, got.family, got.reported_limit, got.reported_prompt_tokens,
                got.reported_prompt_is_lower_bound) == (True, str(made.family), made.reported_limit,
                                                        made.reported_prompt, made.prompt_is_lower_bound)

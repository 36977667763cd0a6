"""Stored response payloads of simulated executors, including real vLLM context-length errors.

Refusal texts follow the six wording families of §6.2 with the *refusing host's own* limit L.
Which family a host uses depends on its vLLM generation (``HostSpec.vllm_style``). The executor
stores every client fault compacted to the nested envelope with an injected id (§2.1).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

_C = (",", ":")


@dataclass(frozen=True)
class Refusal:
    family: int
    message: str
    reported_limit: int
    reported_prompt: int | None
    prompt_is_lower_bound: bool


def refusal_message(style: str, limit: int, prompt: int, max_tokens: int, rng: random.Random) -> Refusal:
    """The vLLM message a host with limit ``limit`` gives for ``prompt`` + ``max_tokens`` > ``limit``."""
    prompt_alone = prompt >= limit
    truncated = min(prompt, limit - max_tokens + 1)  # vLLM truncates at max_input_tokens + 1 (§6.3)
    if style == "v0.9":
        if prompt_alone:
            return Refusal(1, f"This model's maximum context length is {limit} tokens. However, you requested "
                              f"{prompt} tokens in the messages, Please reduce the length of the messages.",
                           limit, prompt, False)
        return Refusal(2, f"This model's maximum context length is {limit} tokens. However, you requested "
                          f"{prompt + max_tokens} tokens ({prompt} in the messages, {max_tokens} in the completion). "
                          "Please reduce the length of the messages or completion.", limit, prompt, False)
    if style == "v0.11":
        if prompt_alone:
            return Refusal(3, f"This model's maximum context length is {limit} tokens. However, your request has "
                              f"{prompt} input tokens. Please reduce the length of the input messages.",
                           limit, prompt, False)
        suffix = " None" if rng.random() < 0.5 else ""  # f"{e} {e.__cause__}" on some endpoints (§6.3)
        return Refusal(4, f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
                          f"maximum context length is {limit} tokens and your request has {prompt} input tokens "
                          f"({max_tokens} > {limit} - {prompt}).{suffix}", limit, prompt, False)
    if style == "renderer-v5":
        return Refusal(5, f"You passed {truncated} input tokens and requested {max_tokens} output tokens. However, "
                          f"the model's context length is only {limit} tokens, resulting in a maximum input length "
                          f"of {limit - max_tokens} tokens. Please reduce the length of the input prompt. "
                          f"(parameter=input_tokens, value={truncated})", limit, truncated,
                       truncated == limit - max_tokens + 1)
    total = truncated + max_tokens
    suffix = f" (parameter=input_tokens, value={truncated})" if rng.random() < 0.5 else ""
    return Refusal(6, f"This model's maximum context length is {limit} tokens. However, you requested {max_tokens} "
                      f"output tokens and your prompt contains at least {truncated} input tokens, for a total of at "
                      f"least {total} tokens. Please reduce the length of the input prompt or the number of requested "
                      f"output tokens.{suffix}", limit, truncated, True)


TOOL_CHOICE_MESSAGE = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
ENGINE_FAULT_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def _event(obj: dict) -> str:
    return "data: " + json.dumps(obj, separators=_C)


def _envelope(events: list[str]) -> str:
    return json.dumps({"events": events}, separators=_C)


def event_id(escrow_id: str, inference_id: int) -> str:
    return f"devshard-{escrow_id}-{inference_id}"


def client_fault_payload(escrow_id: str, inference_id: int, message: str, code: int = 400,
                         err_type: str = "BadRequestError") -> str:
    """``{"events":["data: {\"error\":{…}},\"id\":\"devshard-E-I\"}","data: [DONE]"]}`` exactly as F6."""
    err = {"error": {"code": code, "message": message, "type": err_type}, "id": event_id(escrow_id, inference_id)}
    return _envelope([_event(err), "data: [DONE]"])


def served_payload(escrow_id: str, inference_id: int, model: str, prompt_tokens: int, output_tokens: int) -> str:
    eid = event_id(escrow_id, inference_id)
    chunk = {"id": eid, "object": "chat.completion.chunk", "model": model,
             "choices": [{"index": 0, "delta": {"content": f"answer of {eid}"}}]}
    usage = {"id": eid, "object": "chat.completion.chunk", "model": model, "choices": [],
             "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens,
                       "total_tokens": prompt_tokens + output_tokens}}
    return _envelope([_event(chunk), _event(usage), "data: [DONE]"])


def engine_fault_payload(escrow_id: str, inference_id: int, model: str) -> str:
    """Content, then a terminal 500 error event: a genuine error stream (error-miss material)."""
    eid = event_id(escrow_id, inference_id)
    chunk = {"id": eid, "object": "chat.completion.chunk", "model": model,
             "choices": [{"index": 0, "delta": {"content": "partial"}}]}
    err = {"error": {"code": 500, "message": ENGINE_FAULT_MESSAGE, "type": "InternalServerError"}, "id": eid}
    return _envelope([_event(chunk), _event(err), "data: [DONE]"])


def response_hash(payload: str) -> bytes:
    """``response_hash = sha256(stored body)`` (§4.2)."""
    return hashlib.sha256(payload.encode("utf-8")).digest()


def served_hash(payload: str) -> bytes:
    """``served_hash`` as GetServedHash computes it (gonka-ai/gonka common/completionapi/served_projection.go):
    sha256 of the served view, the stored envelope with every data line's ``logprobs`` dropped. The devnet's
    payloads carry no logprobs, so their served view is the stored body and the hash is response_hash."""
    return response_hash(payload)

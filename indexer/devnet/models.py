"""Models, hosts and effective context limits of the simulated network.

Each host's real limit is computed the way a real host gets it: the epoch's governance
``model_args`` merged with the host's local args by ``MergeModelArgs`` (§2.2), then the last
``--max-model-len`` wins. So the loophole arises by itself: a local ``--max-model-len=600000`` is
not an epoch key when governance uses the two-token form and survives the merge.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable

DEEPSEEK = "deepseek-ai/DeepSeek-V4-Flash-0731"
MINIMAX = "MiniMaxAI/MiniMax-M2.7"
GLM = "zai-org/GLM-5.3-Flash"  # the real GLM 5.3 id is not confirmed (§2.6); placeholder


@dataclass(frozen=True)
class ModelSpec:
    model_id: str
    model_args: tuple[str, ...]
    quantization: str = "fp8"

    @property
    def governance_limit(self) -> int:
        """The limit its governance args set (0: none)."""
        return max_model_len(list(self.model_args)) or 0


MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        DEEPSEEK,
        ("--max-model-len", "400000", "--kv-cache-dtype", "fp8", "--tokenizer-mode", "deepseek_v4",
         "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4", "--reasoning-parser", "deepseek_v4",
         "--trust-remote-code"),
    ),
    ModelSpec(
        MINIMAX,
        ("--max-model-len", "180000", "--enable-auto-tool-choice", "--tool-call-parser", "minimax_m2",
         "--reasoning-parser", "minimax_m2_append_think", "--trust-remote-code"),
    ),
    # GLM governance uses the one-token form, so a two-token local override is appended too
    ModelSpec(GLM, ("--max-model-len=400000", "--enable-auto-tool-choice", "--tool-call-parser", "glm47",
                    "--reasoning-parser", "glm45")),
)
MODELS_BY_ID = {m.model_id: m for m in MODELS}

# host role -> local vLLM args the operator added
HOST_ROLES: dict[str, tuple[str, ...]] = {
    "governance": ("--gpu-memory-utilization", "0.92"),
    "raised": ("--max-model-len=600000",),  # loophole for every model (one-token form never matches)
    "raised_glm_only": ("--max-model-len", "600000"),  # dropped for two-token epochs, kept for GLM
    "lowered": ("--max-model-len=262144",),  # below governance for DeepSeek/GLM: refusals that fit
}
# vLLM generation each host runs: decides which error wording families (§6.2) its refusals use
VLLM_STYLES = ("v0.9", "v0.11", "renderer-v5", "v0.25")


@dataclass(frozen=True)
class HostSpec:
    index: int
    address: str
    name: str  # URL path segment of its simulated devshard host
    role: str
    local_args: tuple[str, ...]
    vllm_style: str

    def limit(self, model: ModelSpec) -> int:
        merged = merge_model_args(list(model.model_args), list(self.local_args))
        value = max_model_len(merged)
        if value is None:
            raise ValueError(f"no --max-model-len for {model.model_id}")
        return value


def merge_model_args(epoch_args: list[str], local_args: list[str]) -> list[str]:
    """``MergeModelArgs`` (decentralized-api/broker/broker.go) as §2.2 describes it.

    Epoch keys are the literal ``--`` tokens of the epoch args; a local key that equals one is dropped
    with its value, any other local key is appended with its value.
    """
    out = list(epoch_args)
    epoch_keys = {t for t in epoch_args if t.startswith("--")}
    i = 0
    while i < len(local_args):
        token = local_args[i]
        has_value = i + 1 < len(local_args) and not local_args[i + 1].startswith("--")
        step = 2 if token.startswith("--") and has_value else 1
        if token.startswith("--") and token not in epoch_keys:
            out.extend(local_args[i : i + step])
        i += step
    return out


_ONE_TOKEN = re.compile(r"^--max-model-len=(\d+)$")


def max_model_len(args: list[str]) -> int | None:
    """Both ``--max-model-len N`` and ``--max-model-len=N``; the last occurrence wins (argparse)."""
    found = None
    for i, token in enumerate(args):
        m = _ONE_TOKEN.match(token)
        if m:
            found = int(m.group(1))
        elif token == "--max-model-len" and i + 1 < len(args) and args[i + 1].isdigit():
            found = int(args[i + 1])
    return found


def host_name(index: int) -> str:
    """The URL path segment of host ``index`` (hostA … hostZ, then host26 …)."""
    return f"host{chr(ord('A') + index)}" if index < 26 else f"host{index}"


def make_hosts(rng: random.Random, count: int, address_of: Callable[[str], str]) -> list[HostSpec]:
    """``count`` hosts with a guaranteed mix of roles (at least two raised and two governance); ``address_of`` gives
    a host name's chain address (the bech32 address of its account key)."""
    roles = ["raised", "governance", "raised", "governance", "lowered", "raised_glm_only"]
    while len(roles) < count:
        roles.append(rng.choice(["governance", "raised", "governance"]))
    roles = roles[:count]
    rng.shuffle(roles)
    hosts = []
    for i, role in enumerate(roles):
        name = host_name(i)
        hosts.append(HostSpec(i, address_of(name), name, role, HOST_ROLES[role], VLLM_STYLES[i % len(VLLM_STYLES)]))
    return hosts

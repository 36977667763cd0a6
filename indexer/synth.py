"""Synthetic but protocol-faithful normalized records (interface.md §2), seeded and streaming.

Used by the benchmark (1M-record files), the bundled demo sample and tests. Each escrow has 16 slots over a few
hosts with multi-slot addresses; inferences go through the real lifecycles with the mix seen on mainnet (mostly
finished, some validated, challenged, timed out, error-missed, 0/0 client-fault refusals around the limits).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterator

import orjson

MODELS = {"deepseek-ai/DeepSeek-V4-Flash-0731": 400_000, "MiniMaxAI/MiniMax-M2.7": 180_000}
GROUP = 16


def _hex(rng: random.Random) -> str:
    return "%064x" % rng.getrandbits(256)


def _refusal_payload(escrow: str, inference_id: int, limit: int, max_tokens: int, prompt: int) -> str:
    msg = (f"This model's maximum context length is {limit} tokens. However, you requested {max_tokens} output "
           f"tokens and your prompt contains at least {limit - max_tokens + 1} input tokens, for a total of at least "
           f"{limit + 1} tokens. Please reduce the length of the input prompt or the number of requested output tokens.")
    event = orjson.dumps({"error": {"code": 400, "message": msg, "type": "BadRequestError"},
                          "id": f"devshard-{escrow}-{inference_id}"}).decode()
    return orjson.dumps({"events": [f"data: {event}", "data: [DONE]"]}).decode()


@dataclass(frozen=True)
class Mix:
    """Shares of all inferences (refusal_* are shares of refusals)."""
    refused_timeout: float
    execution_timeout: float
    error_miss: float
    challenged: float
    validated: float
    near_limit: float
    refusal_validated: float
    refusal_challenged: float


MIXES = {
    # the reference's mainnet epoch 272: 19,764 inferences, 4,959 validations, 812 execution and 45 refusal
    # timeouts; challenges and context refusals are rare
    "mainnet": Mix(refused_timeout=0.0023, execution_timeout=0.041, error_miss=0.005, challenged=0.004,
                   validated=0.245, near_limit=0.015, refusal_validated=0.25, refusal_challenged=0.5),
    # a worst case for the rules stage: many refusals, every one of them challenged
    "adversarial": Mix(refused_timeout=0.01, execution_timeout=0.02, error_miss=0.01, challenged=0.02,
                       validated=0.14, near_limit=0.06, refusal_validated=1.0, refusal_challenged=1.0),
}


class EscrowLog:
    def __init__(self, rng: random.Random, escrow_id: str, epoch: int, hosts: list[str], inferences: int,
                 mix: Mix = MIXES["mainnet"]):
        self.rng, self.escrow_id, self.epoch, self.n, self.mix = rng, escrow_id, epoch, inferences, mix
        self.model = rng.choice(list(MODELS))
        self.limit = MODELS[self.model]
        self.slots = sorted(rng.choice(hosts) for _ in range(GROUP))
        self.weight = {a: self.slots.count(a) for a in set(self.slots)}
        self.missed = [0] * GROUP
        self.invalid = [0] * GROUP

    def records(self) -> Iterator[dict]:
        yield {"kind": "escrow", "escrow_id": self.escrow_id, "epoch_index": self.epoch, "model_id": self.model,
               "slots": self.slots, "vote_threshold_factor": 50, "validation_rate": 1000, "protocol_version": "v5",
               "settled": True}
        for inference_id in range(1, self.n + 1):
            yield from self._inference(inference_id)
        for slot in range(GROUP):
            yield {"kind": "host_stats", "escrow_id": self.escrow_id, "slot_id": slot, "missed": self.missed[slot],
                   "invalid": self.invalid[slot], "cost": str(self.rng.randrange(10**9)),
                   "required_validations": 10, "completed_validations": 9}

    def _tx(self, kind: str, nonce: int, inference_id: int, **fields) -> dict:
        return {"kind": kind, "escrow_id": self.escrow_id, "inference_id": inference_id, "diff_nonce": nonce, **fields}

    def _votes(self, exclude: str | None, accept: bool = True) -> list[dict]:
        """Accepting voters, one slot per address, until the weight passes half the group."""
        votes, weight = [], 0
        for address in sorted(self.weight, key=lambda a: -self.weight[a]):
            if address == exclude:
                continue
            votes.append({"voter_slot": self.slots.index(address), "accept": accept})
            weight += self.weight[address]
            if weight > GROUP // 2:
                break
        return votes

    def _inference(self, i: int) -> Iterator[dict]:
        rng, mix, ex_slot = self.rng, self.mix, i % GROUP
        executor = self.slots[ex_slot]
        roll, near_limit = rng.random(), rng.random() < mix.near_limit
        max_tokens = rng.choice([1024, 3072, 4096])
        prompt = (self.limit - max_tokens + rng.randrange(-2, 3)) if near_limit else rng.randrange(200, self.limit // 2)
        yield self._tx("start", i, i, prompt_hash=_hex(rng), model=self.model, input_length=prompt,
                       max_tokens=max_tokens, started_at=1_790_000_000 + i)
        if roll < mix.refused_timeout:  # never confirmed: refused timeout
            yield self._tx("timeout", i + 3, i, reason="refused", votes=self._votes(executor))
            self.missed[ex_slot] += 1
            return
        yield self._tx("confirm_start", i + 1, i, confirmed_at=1_790_000_001 + i)
        roll -= mix.refused_timeout
        if roll < mix.execution_timeout:  # confirmed, never finished: execution timeout
            yield self._tx("timeout", i + 5, i, reason="execution", votes=self._votes(executor))
            self.missed[ex_slot] += 1
            return
        roll -= mix.execution_timeout
        refusal = near_limit and prompt + max_tokens > self.limit
        out = 0 if refusal else rng.randrange(1, max_tokens)
        fin = {"executor_slot": ex_slot, "input_tokens": 0 if refusal else prompt, "output_tokens": out,
               "response_hash": _hex(rng)}
        if refusal:
            fin["response_payload"] = _refusal_payload(self.escrow_id, i, self.limit, max_tokens, prompt)
        yield self._tx("finish", i + 2, i, **fin)
        if roll < mix.error_miss:  # terminal error stream, error-miss accepted
            yield self._tx("error_miss", i + 4, i, votes=self._votes(executor))
            self.missed[ex_slot] += 1
        elif refusal:  # sampled like any Finish; a raised-limit validator challenges it
            if rng.random() < mix.refusal_validated:
                yield from self._validate(i, ex_slot, executor, challenge=rng.random() < mix.refusal_challenged)
        elif roll - mix.error_miss < mix.challenged + mix.validated:
            yield from self._validate(i, ex_slot, executor, challenge=roll - mix.error_miss < mix.challenged)

    def _validate(self, i: int, ex_slot: int, executor: str, challenge: bool) -> Iterator[dict]:
        others = [a for a in sorted(self.weight) if a != executor]
        if not others:
            return
        validator = self.rng.choice(others)
        yield self._tx("validation", i + 3, i, validator_slot=self.slots.index(validator), valid=not challenge)
        if not challenge:
            return
        invalid_w, valid_w, nonce = self.weight[validator], 0, i + 4
        for voter in others:
            if voter == validator:
                continue
            vote_valid = self.rng.random() < 0.5
            yield self._tx("validation_vote", nonce, i, voter_slot=self.slots.index(voter), vote_valid=vote_valid)
            nonce += 1
            valid_w += self.weight[voter] if vote_valid else 0
            invalid_w += 0 if vote_valid else self.weight[voter]
            if invalid_w > GROUP // 2:
                self.invalid[ex_slot] += 1
                return
            if valid_w > GROUP // 2:
                return


def generate(seed: int = 7, *, escrows: int = 20, inferences: int = 200, epochs: int = 2,
             hosts: int = 8, first_epoch: int = 400, mix: str = "mainnet") -> Iterator[dict]:
    rng = random.Random(seed)
    host_names = [f"gonka1host{chr(65 + h)}" if h < 26 else f"gonka1host{h}" for h in range(hosts)]
    for epoch in range(first_epoch, first_epoch + epochs):
        yield {"kind": "epoch", "epoch_index": epoch, "start_height": epoch * 15391}
        for model, limit in MODELS.items():
            yield {"kind": "model_snapshot", "epoch_index": epoch, "model_id": model,
                   "model_args": ["--max-model-len", str(limit), "--trust-remote-code"]}
        for e in range(escrows):
            escrow_id = str(epoch * 100_000 + e)
            yield from EscrowLog(rng, escrow_id, epoch, host_names, inferences, MIXES[mix]).records()


def perturb(records: Iterator[dict], share: float, seed: int = 7) -> Iterator[dict]:
    """Mutate a share of the txs (nonces, slots, votes, verdicts; some starts dropped, some txs doubled) and
    unsettle half the escrows: still loadable, but the replay now rejects, ignores and drains, paths a faithful
    log never takes (for tests and the replay benchmark)."""
    rng = random.Random(seed)
    for rec in records:
        kind = rec["kind"]
        if kind == "escrow":
            rec["settled"] = rng.random() < 0.5
        elif kind not in ("epoch", "model_snapshot", "host_stats") and rng.random() < share:
            if kind == "start" and rng.random() < 0.3:
                continue
            field = rng.choice([f for f in ("diff_nonce", "executor_slot", "validator_slot", "voter_slot", "valid",
                                            "vote_valid", "votes", "reason") if f in rec])
            if field == "diff_nonce":
                rec[field] = max(0, rec[field] + rng.randint(-4, 4))
            elif field.endswith("slot"):
                rec[field] = rng.randrange(16)
            elif field == "votes":
                rec[field] = [{"voter_slot": rng.randrange(16), "accept": rng.random() < 0.8}
                              for _ in range(rng.randint(0, 12))]
            elif field == "reason":
                rec[field] = rng.choice(["refused", "execution"])
            else:
                rec[field] = not rec[field]
            if rng.random() < 0.2 and ("validator_slot" in rec or "voter_slot" in rec):  # and one more, elsewhere
                yield dict(rec, **{f: rng.randrange(16) for f in ("validator_slot", "voter_slot") if f in rec})
        yield rec


def write_ndjson(path: str, records: Iterator[dict]) -> int:
    n = 0
    with open(path, "wb") as fh:
        for rec in records:
            fh.write(orjson.dumps(rec) + b"\n")
            n += 1
    return n


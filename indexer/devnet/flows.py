"""What happens to each simulated inference: the #2078 situations and ordinary traffic.

The executor is fixed by the nonce (``slots[nonce % 16]``); the prompt is then drawn relative to the
governance limit and that executor's *real* limit, so refusals arise from the host's limit exactly
as in §2: a refusal happens iff ``prompt + max_tokens > limit`` (vLLM accepts equality).
Validators and voters decide by replaying with their own limit (raised-limit hosts serve the prompt
and vote invalid, §2.3); verifiers of error-misses apply the *current* sibling rule (§2.4).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from indexer.devnet import payloads as pl
from indexer.devnet.engine import Engine, EscrowLog, block_hash
from indexer.devnet.sealing import preimages_for
from indexer.devnet.state import CHALLENGED, FINISHED, INVALIDATED, PENDING, STARTED, VALIDATED
from indexer.wire.schemas import schema_for

GENERIC = ("normal",) * 5 + ("error_stream", "billed_fault", "tool_fault", "exec_timeout", "refused_timeout",
                             "timeout_then_finish", "false_challenge")
BOUNDARY = {  # by the executor's limit class relative to governance
    "governance": ("limit_plus_one", "prompt_over", "way_over", "exact_limit", "near_below", "limit_plus_one"),
    "raised": ("limit_plus_one", "prompt_over", "way_over", "exact_limit"),
    "lowered": ("fits_lowered", "near_below", "fits_lowered"),
}
REFUSAL_PATHS = ("challenge", "sibling_challenge", "sibling_error_miss", "error_miss_no_sibling",
                 "timeout_refused", "timeout_execution", "plain")
MAX_TOKENS = (3072, 4096, 2048, 1024)  # gateway default 3072, cap 4096 (§2.6)
WANT_PATIENCE = 25  # nonces a refused prompt waits for a raised-limit host to serve it


@dataclass
class Prompt:
    tokens: int  # true prompt tokens (what an executor's usage would report)
    max_tokens: int
    input_length: int  # the gateway's signed estimate
    text: bytes

    @property
    def total(self) -> int:
        return self.tokens + self.max_tokens

    @property
    def hash(self) -> bytes:
        return hashlib.sha256(self.text).digest()


@dataclass
class Want:
    """A refused prompt that the gateway retries on another host (a speculative sibling)."""

    origin: int
    prompt: Prompt
    then: str  # "error_miss" | "challenge" | "retry" (served elsewhere, nothing follows)
    open: bool = True


class EscrowGenerator(Engine):
    def generate(self) -> EscrowLog:
        self.gov = self.ctx.model.governance_limit
        self.schema = schema_for(self.ctx.protocol_version)
        self.preimages = preimages_for(self.ctx.protocol_version)
        self.decks: dict[str, list[str]] = {}
        self.wants: list[Want] = []
        self.inputs: dict[int, Prompt] = {}
        log = self.run(self.new_inference)
        for iid in self.state.records:
            log.labels[iid]["status"] = self.state.status_name(iid)
        return log

    # -- choosing what happens ----------------------------------------------------------------
    def _draw(self, deck: str, items: tuple[str, ...]) -> str:
        pile = self.decks.setdefault(deck, [])
        if not pile:  # shuffled decks guarantee every case shows up, in random order
            pile.extend(items)
            self.rng.shuffle(pile)
        return pile.pop()

    def new_inference(self) -> None:
        n = self.nonce
        slot = n % len(self.ctx.slots)
        host = self.host_of_slot(slot)
        limit = host.limit(self.ctx.model)
        want = next((w for w in self.wants if w.open and w.prompt.total <= limit), None)
        if want is not None:
            return self._start_sibling(want, limit)
        cls = "governance" if limit == self.gov else ("raised" if limit > self.gov else "lowered")
        case = self._draw(cls, BOUNDARY[cls]) if self.rng.random() < 0.5 else self._draw("generic", GENERIC)
        prompt = self._prompt(case, limit)
        self._start(prompt, case, limit)
        if prompt.total > limit:
            self._refusal(n, prompt)
        else:
            getattr(self, f"_case_{case}", self._case_normal)(n, prompt)

    def _prompt(self, case: str, limit: int) -> Prompt:
        gov, rng = self.gov, self.rng
        m = rng.choice(MAX_TOKENS)
        tokens = {
            "exact_limit": lambda: gov - m,  # prompt + max_tokens == limit: fits (vLLM accepts equality)
            "limit_plus_one": lambda: gov - m + 1,
            "prompt_over": lambda: rng.randint(gov, max(gov, min(gov + 150_000, 600_000 - m))),
            "way_over": lambda: rng.randint(600_001, 853_165),  # refused even at the raised 600000
            "near_below": lambda: gov - m - rng.randint(1, 3000),
            "fits_lowered": lambda: rng.randint(limit - m + 1, gov - m),
        }.get(case, lambda: rng.randint(300, max(400, min(limit, gov) // 3)))()
        exact = rng.random() < 0.5
        estimate = tokens if exact else max(1, tokens + rng.randint(-(tokens // 50), tokens // 50))
        text = f"devnet escrow {self.ctx.escrow_id} nonce {self.nonce} prompt of {tokens} tokens".encode()
        return Prompt(tokens, m, estimate, text)

    # -- txs ----------------------------------------------------------------------------------
    def _has(self, message: str, name: str) -> bool:
        return name in self.schema.messages[message].by_name

    def _observed(self) -> dict[str, Any]:
        """The block a start or confirm observed; left out where it would be a height stamp (v5): see
        :class:`indexer.devnet.sealing.Preimages`."""
        if self.preimages.stamps:
            return {}
        return {"observed_height": self.height(), "observed_block_hash": block_hash(self.height())}

    def _start(self, prompt: Prompt, case: str, limit: int, sibling_of: int | None = None) -> None:
        n = self.nonce
        self.inputs[n] = prompt
        msg: dict[str, Any] = {
            "inference_id": n, "prompt_hash": prompt.hash, "model": self.ctx.model.model_id,
            "input_length": prompt.input_length, "max_tokens": prompt.max_tokens, "started_at": self.now(),
            **self._observed(),
        }
        if self._has("MsgStartInference", "protocol_version"):
            msg["protocol_version"] = self.ctx.protocol_version
        self.log.prompts[n] = {"prompt": base64.b64encode(prompt.text).decode(), "model": self.ctx.model.model_id,
                               "input_length": prompt.input_length, "max_tokens": prompt.max_tokens,
                               "started_at": msg["started_at"]}
        host = self.host_of_slot(n % len(self.ctx.slots))
        self.log.labels[n] = {
            "case": case, "prompt_tokens": prompt.tokens, "max_tokens": prompt.max_tokens,
            "governance_limit": self.gov, "executor_address": host.address, "executor_role": host.role,
            "executor_limit": limit, "refused": prompt.total > limit, "sibling_of": sibling_of,
            "fits_governance": prompt.total <= self.gov and prompt.tokens < self.gov,
        }
        self.push("start_inference", msg)

    def _confirm(self, n: int, then: Any = None) -> None:
        if self.state.records[n].status != PENDING:
            return
        rec = self.state.records[n]
        confirmed_at = self.now() + self.rng.randint(1, 4)
        receipt = self.host_sign(self.ctx.slots[rec.executor_slot],
                                 self.preimages.receipt(self.ctx.escrow_id, n, rec, confirmed_at))
        self.log.receipts[n] = receipt
        self.push("confirm_start", {
            "inference_id": n, "executor_sig": receipt, "confirmed_at": confirmed_at, **self._observed(),
        })
        if then is not None:
            then()

    def _finish(self, n: int, payload: str, input_tokens: int, output_tokens: int, kind: str) -> None:
        if self.state.records[n].status != STARTED:
            return
        self.log.payloads[n] = payload
        self.log.labels[n]["finish_kind"] = kind
        msg: dict[str, Any] = {
            "inference_id": n, "response_hash": pl.response_hash(payload), "input_tokens": input_tokens,
            "output_tokens": output_tokens, "executor_slot": n % len(self.ctx.slots),
            "escrow_id": self.ctx.escrow_id,
            "observed_height": self.height(), "observed_block_hash": block_hash(self.height()),
        }
        if self._has("MsgFinishInference", "served_hash"):
            msg["served_hash"] = pl.served_hash(payload)
        msg["proposer_sig"] = self.host_sign(self.ctx.slots[n % len(self.ctx.slots)], self.preimages.finish(msg))
        self.push("finish_inference", msg)

    def _serve(self, n: int, then: Any = None) -> None:
        prompt = self.inputs[n]
        out = self.rng.randint(1, prompt.max_tokens)
        payload = pl.served_payload(self.ctx.escrow_id, n, self.ctx.model.model_id, prompt.tokens, out)
        self._finish(n, payload, prompt.tokens, out, "served")
        (then or (lambda: self._sample_validations(n)))()

    def _confirm_then(self, n: int, delay: tuple[int, int], action: Any) -> None:
        """Receipt after 1–2 nonces, then ``action`` ``delay`` nonces later."""
        self.later((1, 2), lambda: self._confirm(n, lambda: self.later(delay, action)))

    def _timeout(self, n: int, reason: int, sufficient: bool = True) -> None:
        needed = PENDING if reason == 1 else STARTED
        if self.state.records[n].status != needed:
            return
        exec_addr = self.ctx.slots[n % len(self.ctx.slots)]
        votes, weight = [], 0
        for addr in self.addresses(exclude=(exec_addr,)):
            # the "insufficient" variant: voters that still see a Finish coming reject
            accept = sufficient or weight + self.state.weight(addr) <= self.state.threshold
            weight += self.state.weight(addr) if accept else 0
            votes.append(self._vote_entry(addr, accept, self.preimages.timeout_vote(self.ctx.escrow_id, n, reason,
                                                                                    accept)))
        if not self.state.accepts(votes):
            self.log.labels[n]["timeout_rejected"] = reason  # too few accept votes: the gateway cannot submit it
            self.shortfall()
            return
        self.push("timeout_inference", {"inference_id": n, "reason": reason, "votes": votes})

    def _vote_entry(self, addr: str, accept: bool, preimage: bytes) -> dict[str, Any]:
        return {"voter_slot": self.first_slot(addr), "accept": accept, "signature": self.host_sign(addr, preimage)}

    def _error_miss(self, n: int, sibling: int | None) -> None:
        rec = self.state.records[n]
        if rec.status != FINISHED:
            return  # an error-miss needs a Finished record; the gateway would not send it
        if not self._has("DevshardTx", "error_miss"):
            self.log.labels[n]["error_miss_unsupported"] = True  # before v5 a session has no error-miss
            return
        kind = self.log.labels[n].get("finish_kind")
        sib = self.state.records.get(sibling) if sibling is not None else None
        sibling_ok = (sib is not None and sibling != n and sib.prompt_hash == rec.prompt_hash
                      and sib.output_tokens > 0 and sib.status in (FINISHED, VALIDATED))
        accept = kind in ("engine_fault", "billed_fault") or sibling_ok
        exec_addr = self.ctx.slots[rec.executor_slot]
        preimage = self.preimages.error_miss_vote(self.ctx.escrow_id, n, accept, rec.response_hash)
        votes = [self._vote_entry(a, accept, preimage) for a in self.addresses(exclude=(exec_addr,))]
        self.log.labels[n]["error_miss_sibling"] = sibling
        if not self.state.accepts(votes):
            self.log.labels[n]["error_miss_rejected"] = True  # the voters refused: nothing to submit
            self.shortfall()
            return
        self.push("error_miss", {"inference_id": n, "votes": votes})

    # -- validation and challenges ------------------------------------------------------------
    def _verdict(self, n: int, addr: str) -> bool:
        """What validator ``addr`` concludes from its own replay (§3.8, deployed v7 behaviour)."""
        kind = self.log.labels[n].get("finish_kind")
        if kind == "context_fault":
            return self.limit_of(addr) < self.inputs[n].total  # it refuses too → fault confirmed
        return kind not in ("billed_fault", "engine_fault")

    def _validators(self, n: int) -> list[str]:
        return self.addresses(exclude=(self.ctx.slots[n % len(self.ctx.slots)],))

    def _sample_validations(self, n: int) -> None:
        validators = self._validators(n)  # a 2-host network has one other address to sample
        for addr in self.rng.sample(validators, min(self.rng.choice((0, 0, 1, 1, 2)), len(validators))):
            self._sampled(addr)
            if self.rng.random() < 0.85:  # some owed validations are never delivered
                self.later((2, 8), lambda a=addr: self._validate(n, a))

    def _sampled(self, addr: str) -> None:
        slot = self.first_slot(addr)  # observability only: the session's host stats count no validations
        self.log.validation_sampled[slot] = self.log.validation_sampled.get(slot, 0) + 1

    def _open_challenge(self, n: int, valid: bool | None = None) -> None:
        """Validation by a raised-limit validator if there is one (the #2078 path)."""
        capable = [a for a in self._validators(n) if self.limit_of(a) >= self.inputs[n].total]
        addr = self.rng.choice(capable or self._validators(n))
        self._sampled(addr)
        self.later((2, 6), lambda: self._validate(n, addr, valid))

    def _validate(self, n: int, addr: str, valid: bool | None = None) -> None:
        rec = self.state.records[n]
        if addr in rec.validated_by or rec.status not in (FINISHED, CHALLENGED, VALIDATED, INVALIDATED):
            return
        valid = self._verdict(n, addr) if valid is None else valid
        was_finished = rec.status == FINISHED
        msg = {"inference_id": n, "validator_slot": self.first_slot(addr), "valid": valid,
               "escrow_id": self.ctx.escrow_id}
        msg["proposer_sig"] = self.host_sign(addr, self.preimages.validation(msg))
        self.push("validation", msg)
        if was_finished and rec.status == CHALLENGED:
            for voter in self._validators(n):
                if voter not in rec.validated_by:
                    self.later((1, 8), lambda v=voter: self._vote(n, v))

    def _vote(self, n: int, addr: str) -> None:
        rec = self.state.records[n]
        decided = rec.status in (VALIDATED, INVALIDATED)
        if addr in rec.validated_by or not (rec.status == CHALLENGED or decided):
            return
        if decided and self.rng.random() < 0.5:
            return  # late votes are sometimes batched anyway; the chain ignores them
        msg = {"inference_id": n, "voter_slot": self.first_slot(addr), "vote_valid": self._verdict(n, addr),
               "escrow_id": self.ctx.escrow_id}
        msg["proposer_sig"] = self.host_sign(addr, self.preimages.vote(msg))
        self.push("validation_vote", msg)

    # -- context refusals ---------------------------------------------------------------------
    def _refusal(self, n: int, prompt: Prompt) -> None:
        path = self._draw("refusal", REFUSAL_PATHS)
        self.log.labels[n]["refusal_path"] = path
        if path in ("timeout_refused", "timeout_execution"):
            if path == "timeout_refused":  # refused before any receipt
                self.later((4, 8), lambda: self._timeout(n, 1))
            else:  # receipt landed, the 0/0 Finish did not in time
                self._confirm_then(n, (4, 8), lambda: self._timeout(n, 2))
            want = Want(n, prompt, "retry")  # the gateway retries the prompt elsewhere (a speculative sibling)
            self.wants.append(want)
            self.later(WANT_PATIENCE, lambda: self._give_up(want))
        else:
            self._confirm_then(n, (1, 3), lambda: self._finish_refused(n, path))

    def _finish_refused(self, n: int, path: str) -> None:
        prompt, host = self.inputs[n], self.host_of_slot(n % len(self.ctx.slots))
        refusal = pl.refusal_message(host.vllm_style, host.limit(self.ctx.model), prompt.tokens,
                                     prompt.max_tokens, self.rng)
        self.log.labels[n].update(family=refusal.family, reported_limit=refusal.reported_limit,
                                  reported_prompt_tokens=refusal.reported_prompt,
                                  reported_prompt_is_lower_bound=refusal.prompt_is_lower_bound)
        payload = pl.client_fault_payload(self.ctx.escrow_id, n, refusal.message)
        self._finish(n, payload, 0, 0, "context_fault")  # #1903: a refusal is a 0/0 client-fault Finish
        if path == "plain":
            self._sample_validations(n)
        elif path == "challenge":
            self._open_challenge(n)
        elif path == "error_miss_no_sibling":
            self.later((2, 5), lambda: self._error_miss(n, None))
        else:
            want = Want(n, prompt, "error_miss" if path == "sibling_error_miss" else "challenge")
            self.wants.append(want)
            self.later(WANT_PATIENCE, lambda: self._give_up(want))

    def _give_up(self, want: Want) -> None:
        if not want.open:
            return
        want.open = False  # no raised-limit executor came along: go on without a sibling
        if want.then == "error_miss":
            self._error_miss(want.origin, None)
        elif want.then == "challenge":
            self._open_challenge(want.origin)

    def _start_sibling(self, want: Want, limit: int) -> None:
        want.open = False
        n = self.nonce
        self._start(want.prompt, "sibling", limit, sibling_of=want.origin)
        self.log.labels[want.origin]["sibling"] = n

        def after_served() -> None:
            self._sample_validations(n)
            if want.then == "error_miss":
                self.later((1, 3), lambda: self._error_miss(want.origin, n))
            elif want.then == "challenge":
                self._open_challenge(want.origin)

        self._confirm_then(n, (1, 3), lambda: self._serve(n, after_served))

    # -- ordinary traffic ---------------------------------------------------------------------
    def _case_normal(self, n: int, prompt: Prompt) -> None:
        self._confirm_then(n, (1, 3), lambda: self._serve(n))

    def _case_error_stream(self, n: int, prompt: Prompt) -> None:
        def finish() -> None:
            payload = pl.engine_fault_payload(self.ctx.escrow_id, n, self.ctx.model.model_id)
            self._finish(n, payload, prompt.tokens, self.rng.randint(1, 200), "engine_fault")
            self.later((2, 4), lambda: self._error_miss(n, None))

        self._confirm_then(n, (1, 3), finish)

    def _case_billed_fault(self, n: int, prompt: Prompt) -> None:
        def finish() -> None:  # a 400 body but billed output: error-misses accept it (§3.5 rule 6)
            payload = pl.client_fault_payload(self.ctx.escrow_id, n, pl.TOOL_CHOICE_MESSAGE)
            self._finish(n, payload, prompt.tokens, prompt.max_tokens, "billed_fault")
            self.later((2, 4), lambda: self._error_miss(n, None))

        self._confirm_then(n, (1, 3), finish)

    def _case_tool_fault(self, n: int, prompt: Prompt) -> None:
        def finish() -> None:  # a client fault that is not about context length
            payload = pl.client_fault_payload(self.ctx.escrow_id, n, pl.TOOL_CHOICE_MESSAGE)
            self._finish(n, payload, 0, 0, "tool_fault")
            self._sample_validations(n)

        self._confirm_then(n, (1, 3), finish)

    def _case_exec_timeout(self, n: int, prompt: Prompt) -> None:
        self._confirm_then(n, (4, 8), lambda: self._timeout(n, 2))

    def _case_refused_timeout(self, n: int, prompt: Prompt) -> None:
        self.later((4, 8), lambda: self._timeout(n, 1))

    def _case_timeout_then_finish(self, n: int, prompt: Prompt) -> None:
        def late_finish() -> None:
            self._timeout(n, 2, sufficient=False)
            self.later((1, 2), lambda: self._serve(n))

        self._confirm_then(n, (3, 5), late_finish)

    def _case_false_challenge(self, n: int, prompt: Prompt) -> None:
        # a faulty validator challenges a correct answer; honest voters vote valid
        self._confirm_then(n, (1, 3), lambda: self._serve(n, lambda: self._open_challenge(n, valid=False)))

"""Record builders for the rules-stage pipeline tests (tests/test_rules_*.py).

`Log` writes one escrow's txs with strictly increasing diff nonces and picks each inference id (= the nonce of its
start diff) so that its executor slot (id % group size) is the one asked for. The default escrow is the reference
group of gonka-devshard.md §7: A = 0-3, B = 4-5, C = 6-8, D = 9-10, E = 11-15 (weights A 4, B 2, C 3, D 2, E 5;
threshold 8 with factor 50).
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import psycopg

from tests.support.helpers import escrow, ingest, tx, write_lines

MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
MINIMAX = "MiniMaxAI/MiniMax-M2.7"
GOV = 400_000
EPOCH = 408
A, B, C, D, E = (f"gonka1host{x}" for x in "ABCDE")
ACCEPT = (0, 11)  # A (4) + E (5) = 9 > 8: a timeout / error-miss with these accepting voters applies

_hashes = itertools.count(1)


def new_hash() -> str:
    return f"{next(_hashes):064x}"


def snapshot(args, epoch=EPOCH, model=MODEL) -> dict:
    return {"kind": "model_snapshot", "epoch_index": epoch, "model_id": model, "model_args": list(args)}


def gov_snapshot(limit=GOV, epoch=EPOCH, model=MODEL) -> dict:
    return snapshot(["--max-model-len", str(limit), "--kv-cache-dtype", "fp8", "--trust-remote-code"], epoch, model)


def stored(message: str, code=400, etype="BadRequestError", flat=False, ident="devshard-1971-1") -> str:
    """A devshard stored response payload (§6.1) holding one error event and [DONE]."""
    if flat:
        err = {"object": "error", "message": message, "type": etype, "param": None, "code": code}
    else:
        err = {"error": {"code": code, "message": message, "type": etype}, "id": ident}
    return json.dumps({"events": ["data: " + json.dumps(err), "data: [DONE]"]})


# vLLM wordings (§6.2); L = the refusing host's limit, P prompt tokens, M requested output.
def fam3(L, P):
    return (f"This model's maximum context length is {L} tokens. However, your request has {P} input tokens. "
            "Please reduce the length of the input messages.")


def fam4(L, P, M):
    return (f"'max_tokens' or 'max_completion_tokens' is too large: {M}. This model's maximum context length is {L} "
            f"tokens and your request has {P} input tokens ({M} > {L} - {P}). None")


def fam6_at_least(L, M):
    P = L - M + 1
    return (f"This model's maximum context length is {L} tokens. However, you requested {M} output tokens and your "
            f"prompt contains at least {P} input tokens, for a total of at least {L + 1} tokens. Please reduce the "
            f"length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value={P})")


def fam1(L, P):
    return (f"This model's maximum context length is {L} tokens. However, you requested {P} tokens in the messages, "
            "Please reduce the length of the messages.")


def fam2(L, P, M):
    return (f"This model's maximum context length is {L} tokens. However, you requested {P + M} tokens ({P} in the "
            f"messages, {M} in the completion). Please reduce the length of the messages or completion.")


def fam5(L, P, M):
    return (f"You passed {P} input tokens and requested {M} output tokens. However, the model's context length is "
            f"only {L} tokens, resulting in a maximum input length of {L - M} tokens. Please reduce the length of the "
            f"input prompt. (parameter=input_tokens, value={P})")


TOOL_CHOICE = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


class Log:
    """One escrow's record stream."""

    def __init__(self, escrow_id="1971", epoch=EPOCH, model=MODEL, slots=None, first_nonce=1000, **escrow_kw):
        self.eid, self.model = escrow_id, model
        self.records: list[dict] = [escrow(escrow_id, slots=slots, epoch=epoch, model=model, **escrow_kw)]
        self.group = len(self.records[0]["slots"])
        self.nonce = first_nonce

    def _next(self) -> int:
        self.nonce += 1
        return self.nonce

    def _add(self, kind, iid, **fields) -> int:
        nonce = self._next()
        self.records.append(tx(kind, iid, nonce, escrow_id=self.eid, **fields))
        return nonce

    # -- txs -----------------------------------------------------------------------------------------------------
    def start(self, slot, prompt=None, input_length=1000, max_tokens=4096) -> int:
        iid = self.nonce + 1 + (slot - (self.nonce + 1)) % self.group
        self.nonce = iid
        self.records.append(tx("start", iid, iid, escrow_id=self.eid, prompt_hash=prompt or new_hash(),
                               model=self.model, input_length=input_length, max_tokens=max_tokens,
                               started_at=1_790_812_800))
        return iid

    def confirm(self, iid) -> int:
        return self._add("confirm_start", iid, confirmed_at=1_790_812_801)

    def finish(self, iid, input_tokens=0, output_tokens=0, payload=None, slot=None) -> int:
        fields = dict(executor_slot=iid % self.group if slot is None else slot, input_tokens=input_tokens,
                      output_tokens=output_tokens, response_hash=f"{iid:064x}")
        if payload is not None:
            fields["response_payload"] = payload
        return self._add("finish", iid, **fields)

    def validation(self, iid, slot, valid) -> int:
        return self._add("validation", iid, validator_slot=slot, valid=valid)

    def vote(self, iid, slot, valid) -> int:
        return self._add("validation_vote", iid, voter_slot=slot, vote_valid=valid)

    def timeout(self, iid, reason, voters=ACCEPT) -> int:
        return self._add("timeout", iid, reason=reason, votes=[{"voter_slot": s, "accept": True} for s in voters])

    def error_miss(self, iid, voters=ACCEPT) -> int:
        return self._add("error_miss", iid, votes=[{"voter_slot": s, "accept": True} for s in voters])

    # -- composites ----------------------------------------------------------------------------------------------
    def served(self, slot, prompt=None, input_tokens=1000, output_tokens=100, max_tokens=4096) -> int:
        """A started, confirmed and finished inference with usage."""
        iid = self.start(slot, prompt, input_length=input_tokens, max_tokens=max_tokens)
        self.confirm(iid)
        self.finish(iid, input_tokens, output_tokens)
        return iid

    def refusal(self, slot, prompt=None, max_tokens=4096, payload=None, input_length=1000) -> int:
        """A started, confirmed 0/0 Finish (a context refusal), with or without a stored payload."""
        iid = self.start(slot, prompt, input_length=input_length, max_tokens=max_tokens)
        self.confirm(iid)
        self.finish(iid, 0, 0, payload)
        return iid

    def invalidate(self, iid, challenger=9, voters=(0, 6)) -> None:
        """Challenge (D by default) and invalid votes (A, C) that take the tally over 8."""
        self.validation(iid, challenger, False)
        for s in voters:
            self.vote(iid, s, False)


def load(db_url: str, tmp_path: Path, records, name="in.ndjson", rules=True):
    return ingest(db_url, write_lines(tmp_path / name, records), rules=rules)


def rows(conn: psycopg.Connection, sql: str, *params) -> list[tuple]:
    return conn.execute(sql, params).fetchall()


def by_id(conn: psycopg.Connection, view: str, columns: str, where: str = "true") -> dict:
    """{inference_id: (columns...)} from an api view."""
    out = {}
    for r in conn.execute(f"SELECT inference_id, {columns} FROM {view} WHERE {where}").fetchall():
        out[r[0]] = r[1:] if len(r) > 2 else r[1]
    return out

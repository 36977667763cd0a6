"""The v4.1 release fixture, rebuilt for the indexer.verify tests. Vectors:
/work/shared/data/upstream-vectors/gonka-v4.1/v41-state-roots.json, copied from gonka-ai/gonka @bb34d444
``devshard/state/testdata/`` (roots made by release/devshard/v4.1.0). The 34 diffs are ``journalFixture.script``
(``devshard/state/journal_test.go`` @bb34d444) built with the tx builders of ``committed_hash_test.go`` at the same
commit. Every host signature is made with coincurve and recovered through indexer.verify.signatures, so the state
machine sees the address a real signature yields."""
from __future__ import annotations

import hashlib
from pathlib import Path

import coincurve

from indexer.verify import apply, proto as pb, signatures as sig

VECTORS = Path("/work/shared/data/upstream-vectors/gonka-v4.1/v41-state-roots.json")
ESCROW = "escrow-journal"
KEYS = [coincurve.PrivateKey.from_int(i) for i in range(1, 7)]  # SignerFromHex("%064x" % (i+1)), i = 0..5
HOSTS = [sig.address_of_pubkey(k.public_key.format()) for k in KEYS[:5]]
CONFIG = apply.Config(token_price=1, vote_threshold=1, seal_grace_nonces=6, seal_grace_seconds=3600,
                      auto_seal_every=1)


def _signed_by(slot: int, message: bytes) -> str:
    signature = KEYS[slot].sign_recoverable(message, hasher=lambda m: hashlib.sha256(m).digest())
    return sig.recover_address(message, signature)


def start(i):
    return {"kind": "start", "inference_id": i, "prompt_hash": b"prompt", "model": "llama", "input_length": 100,
            "max_tokens": 50, "started_at": 1000}


def confirm(i):
    receipt = sig.executor_receipt_bytes(inference_id=i, prompt_hash=b"prompt", model="llama", input_length=100,
                                         max_tokens=50, started_at=1000, escrow_id=ESCROW, confirmed_at=1000)
    return {"kind": "confirm_start", "inference_id": i, "confirmed_at": 1000, "signer": _signed_by(i % 5, receipt)}


def finish(i):
    body = dict(inference_id=i, response_hash=b"response", input_tokens=80, output_tokens=40, executor_slot=i % 5,
                escrow_id=ESCROW)
    return {"kind": "finish", **body, "signer": _signed_by(i % 5, sig.finish_bytes(**body))}


def validation(i, slot, valid):
    body = dict(inference_id=i, validator_slot=slot, valid=valid, escrow_id=ESCROW)
    return {"kind": "validation", **body, "signer": _signed_by(slot, sig.validation_bytes(**body))}


def vote(i, slot, valid):
    body = dict(inference_id=i, voter_slot=slot, vote_valid=valid, escrow_id=ESCROW)
    return {"kind": "validation_vote", **body, "signer": _signed_by(slot, sig.validation_vote_bytes(**body))}


def timeout(i, reason):
    # TimeoutVoteContent's signed bytes are not built here: the voters are the slots' own keys
    return {"kind": "timeout", "inference_id": i, "reason": reason, "votes": [(0, True, HOSTS[0]), (1, True, HOSTS[1])]}


def script():
    return [
        [start(1)], [confirm(1)], [finish(1)],
        [start(4)], [confirm(4)], [finish(4)], [validation(4, 0, True), validation(4, 0, True)],
        [start(8)], [confirm(8)], [finish(8)], [validation(8, 4, False)], [vote(8, 0, True)], [vote(8, 1, True)],
        [start(14)], [confirm(14)], [finish(14)], [validation(14, 0, False)], [vote(14, 1, False)],
        [start(19)], [confirm(19)], [timeout(19, apply.EXECUTION)],
        [start(22)], [confirm(22)], [finish(22)],
        [], [], [], [],
        [{"kind": "finalize"}],
        [], [], [], [], [],
    ]


def session(version="v4.1"):
    return apply.Session.new(ESCROW, CONFIG, tuple(HOSTS), 1_000_000, version)


def after(n, version="v4.1", **kw):
    s = apply.Session.new(ESCROW, kw.pop("config", CONFIG), kw.pop("slots", tuple(HOSTS)), kw.pop("balance", 1_000_000),
                          version, **kw)
    for nonce, txs in enumerate(script()[:n], start=1):
        s.apply(nonce, txs)
    return s


V5_CONFIG = apply.Config(token_price=1, vote_threshold=1, seal_grace_nonces=6, seal_grace_seconds=3600,
                         auto_seal_every=1, execution_timeout=0)  # the v4.1 fixture's config as the v5 line takes it


def v5(n=0, **kw):
    """A v5 session after the first ``n`` fixture diffs."""
    return after(n, "v5", config=kw.pop("config", V5_CONFIG), **kw)


def sign_by(slot: int, message: bytes) -> bytes:
    return KEYS[slot].sign_recoverable(message, hasher=lambda m: hashlib.sha256(m).digest())


def error_miss(i, slots=(2, 3), response_hash=b"response", accept=True):
    """A v5 error-miss of inference ``i`` with the votes of ``slots`` signed over the record's response hash."""
    return {"kind": "error_miss", "inference_id": i, "votes": [
        (slot, accept, sign_by(slot, sig.error_miss_vote_bytes(escrow_id=ESCROW, inference_id=i, accept=accept,
                                                               response_hash=response_hash))) for slot in slots]}


USER = sig.address_of_pubkey(KEYS[5].public_key.format())


def _sign(key, message: bytes) -> bytes:
    return key.sign_recoverable(message, hasher=lambda m: hashlib.sha256(m).digest())


def wire_tx(tx: dict, escrow: str = ESCROW) -> bytes:
    """The served ``DevshardTx`` bytes of a fixture tx for ``escrow``, signed by the fixture's keys as upstream's
    builders do (the roots do not depend on the escrow id, so any id reproduces the vectors)."""
    k = tx["kind"]
    i = tx.get("inference_id", 0)
    if k == "start":
        body = pb.concat((pb.f_uint(1, i), pb.f_bytes(2, tx["prompt_hash"]), pb.f_str(3, tx["model"]),
                          pb.f_uint(4, tx["input_length"]), pb.f_uint(5, tx["max_tokens"]),
                          pb.f_uint(6, tx["started_at"])))
        return pb.f_msg(1, body)
    if k == "confirm_start":
        receipt = sig.executor_receipt_bytes(inference_id=i, prompt_hash=b"prompt", model="llama", input_length=100,
                                             max_tokens=50, started_at=1000, escrow_id=escrow, confirmed_at=1000)
        return pb.f_msg(2, pb.f_uint(1, i) + pb.f_bytes(2, _sign(KEYS[i % 5], receipt)) + pb.f_uint(3, 1000))
    if k == "finish":
        signed = sig.finish_bytes(inference_id=i, response_hash=b"response", input_tokens=80, output_tokens=40,
                                  executor_slot=i % 5, escrow_id=escrow)
        body = pb.concat((pb.f_uint(1, i), pb.f_bytes(2, b"response"), pb.f_uint(3, 80), pb.f_uint(4, 40),
                          pb.f_uint(5, i % 5), pb.f_bytes(6, _sign(KEYS[i % 5], signed)), pb.f_str(7, escrow)))
        return pb.f_msg(3, body)
    if k == "timeout":
        votes = b"".join(pb.f_msg(3, pb.f_uint(1, slot) + pb.f_bool(2, True) + pb.f_bytes(3, _sign(
            KEYS[slot], sig.timeout_vote_bytes(escrow_id=escrow, inference_id=i, reason=tx["reason"], accept=True))))
            for slot, _, _ in tx["votes"])
        return pb.f_msg(4, pb.f_uint(1, i) + pb.f_uint(2, tx["reason"]) + votes)
    if k in ("validation", "validation_vote"):
        slot_key, flag_key, number = (("validator_slot", "valid", 5) if k == "validation"
                                      else ("voter_slot", "vote_valid", 6))
        builder = sig.validation_bytes if k == "validation" else sig.validation_vote_bytes
        slot, flag = tx[slot_key], tx[flag_key]
        signed = builder(**{"inference_id": i, slot_key: slot, flag_key: flag, "escrow_id": escrow})
        return pb.f_msg(number, pb.concat((pb.f_uint(1, i), pb.f_uint(2, slot), pb.f_bool(3, flag),
                                           pb.f_bytes(4, _sign(KEYS[slot], signed)), pb.f_str(5, escrow))))
    if k == "finalize":
        return pb.f_msg(8, b"")
    raise ValueError(k)


def diff_content(nonce: int, txs: list[bytes], root: bytes, escrow: str = ESCROW) -> bytes:
    return pb.concat((pb.f_uint(1, nonce), *(pb.f_msg(2, t) for t in txs), pb.f_str(3, escrow), pb.f_bytes(4, root)))


def user_sign(content: bytes, key=None) -> bytes:
    return _sign(key or KEYS[5], content)

"""The v4.1 release fixture (tests/support/verify_kit.py) as the NDJSON records the indexer loads: the escrow with its
creator and session config, the replay's tx records, every diff as a signed_diff record, the settlement with its
message and raw transaction, and the epoch's devshard_escrow_params. Each tamper kind the verification stage must
catch is a change to these records (:func:`tampered`)."""
from __future__ import annotations

import base64

import json
from functools import cache

import coincurve

from indexer.verify import apply, bundle as bd, proto as pb, settlement as st
from tests.support.verify_kit import CONFIG, HOSTS, KEYS, USER, VECTORS, after, diff_content, script, user_sign, wire_tx

EPOCH = 272
EID = "124"
ROOTS = [bytes.fromhex(r) for r in json.loads(VECTORS.read_text())]
HEIGHT = 777
SOURCE = "http://host-a.example:8080"
REASONS = {apply.REFUSED: "refused", apply.EXECUTION: "execution"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def signed_diff(nonce: int, txs: list[dict], eid: str = EID) -> bd.SignedDiff:
    content = diff_content(nonce, [wire_tx(t, eid) for t in txs], ROOTS[nonce], eid)
    return bd.SignedDiff(nonce, content, user_sign(content))


@cache
def _final():
    return after(34)


def settle_msg(eid: str = EID, slots=(0, 1, 2, 3), keys=KEYS, fees_delta: int = 0) -> st.SettleMsg:
    """The settlement of the fixture's final state for escrow ``eid``, co-signed by ``slots`` with ``keys``."""
    s = _final()
    stats = [st.HostStatsEntry(slot, h.missed, h.invalid, h.cost, h.required_validations, h.completed_validations)
             for slot, h in sorted(s.state.host_stats.items())]
    msg = st.SettleMsg(settler=USER, escrow_id=int(eid), state_root=s.root(), nonce=34,
                       rest_hash=st.sr.rest_hash(s.state), host_stats=stats, fees=s.state.fees + fees_delta,
                       version="v4.1")
    msg.state_root = st.settlement_root(msg)
    msg.signatures = [st.SlotSignature(i, st.sign_state(keys[i], msg.state_root, int(eid), 34)) for i in slots]
    return msg


def escrow_record(eid: str = EID, **changes) -> dict:
    return {"kind": "escrow", "escrow_id": eid, "epoch_index": EPOCH, "model_id": "llama", "slots": list(HOSTS),
            "vote_threshold_factor": 20, "protocol_version": "v4.1", "settled": True, "creator": USER,
            "amount": "1000000", "token_price": str(CONFIG.token_price), "create_devshard_fee": str(CONFIG.create_fee),
            "fee_per_nonce": str(CONFIG.fee_per_nonce), "inference_seal_grace_nonces": CONFIG.seal_grace_nonces,
            "inference_seal_grace_seconds": CONFIG.seal_grace_seconds,
            "auto_seal_every_n_nonces": CONFIG.auto_seal_every, **changes}


def tx_records(eid: str = EID) -> list[dict]:
    """The replay's records of the fixture's txs (finalize has none; a repeated validation is one record)."""
    out = []
    for nonce, txs in enumerate(script(), start=1):
        for tx in txs:
            kind, i = tx["kind"], tx.get("inference_id")
            base = {"kind": kind, "escrow_id": eid, "inference_id": i, "diff_nonce": nonce}
            if kind == "start":
                out.append({**base, "prompt_hash": tx["prompt_hash"].hex(), "model": tx["model"],
                            "input_length": tx["input_length"], "max_tokens": tx["max_tokens"],
                            "started_at": tx["started_at"]})
            elif kind == "confirm_start":
                out.append({**base, "confirmed_at": tx["confirmed_at"]})
            elif kind == "finish":
                out.append({**base, "executor_slot": tx["executor_slot"], "input_tokens": tx["input_tokens"],
                            "output_tokens": tx["output_tokens"], "response_hash": tx["response_hash"].hex()})
            elif kind == "validation":
                out.append({**base, "validator_slot": tx["validator_slot"], "valid": tx["valid"]})
            elif kind == "validation_vote":
                out.append({**base, "voter_slot": tx["voter_slot"], "vote_valid": tx["vote_valid"]})
            elif kind == "timeout":
                out.append({**base, "reason": REASONS[tx["reason"]],
                            "votes": [{"voter_slot": s, "accept": a} for s, a, _ in tx["votes"]]})
    return out


def signed_diff_records(eid: str = EID) -> list[dict]:
    out = []
    for nonce, txs in enumerate(script(), start=1):
        d = signed_diff(nonce, txs, eid)
        out.append({"kind": "signed_diff", "escrow_id": eid, "nonce": nonce, "content": b64(d.content),
                    "user_sig": d.user_sig.hex(), "post_state_root": ROOTS[nonce].hex(),
                    "state_hash": ROOTS[nonce].hex(), "source_host": SOURCE})
    return out


def tx_raw(msg: bytes) -> bytes:
    """A broadcast ``TxRaw`` carrying ``msg`` (body with one Any message; auth info and signature as opaque bytes)."""
    body = pb.f_msg(1, pb.f_str(1, st.SETTLE_TYPE_URL) + pb.f_bytes(2, msg))
    return pb.f_bytes(1, body) + pb.f_bytes(2, b"auth-info") + pb.f_bytes(3, b"signature")


def settlement_record(msg: st.SettleMsg | None = None, with_msg: bool = True) -> dict:
    msg = msg or settle_msg()
    data = st.encode_settle_msg(msg)
    raw = tx_raw(data)
    return {"kind": "settlement", "escrow_id": str(msg.escrow_id), "tx_hash": st.tx_hash(raw).lower(), "height": HEIGHT,
            "settler": msg.settler, "state_root": msg.state_root.hex(), "rest_hash": msg.rest_hash.hex(),
            "nonce": msg.nonce, "fees": str(msg.fees), "state_root_and_protocol_version": msg.version,
            "host_stats": {str(h.slot_id): {"missed": h.missed, "invalid": h.invalid, "cost": str(h.cost),
                                            "required_validations": h.required_validations,
                                            "completed_validations": h.completed_validations}
                           for h in msg.host_stats},
            "signatures": {str(s.slot_id): s.signature.hex() for s in msg.signatures},
            "msg": b64(data) if with_msg else None, "tx_raw": b64(raw) if with_msg else None}


def epoch_params_record() -> dict:
    return {"kind": "epoch_params", "epoch_index": EPOCH,
            "devshard_escrow_params": {"approved_versions": [{"name": "v4.1"}], "max_nonce": 1000}}


def records(eid: str = EID) -> list[dict]:
    """Every record of the fixture escrow (as escrow ``eid``), in an order the loader takes (escrow before its txs).
    Any decimal id gives the same roots; the signatures cover the id, so each id's diffs are signed anew."""
    return [escrow_record(eid), epoch_params_record(), *tx_records(eid), *signed_diff_records(eid),
            settlement_record(settle_msg(eid))]


def _flip(rec: dict) -> dict:
    content = bytearray(base64.b64decode(rec["content"]))
    content[7] ^= 0x01  # the inference_id of the diff's first tx
    return {**rec, "content": b64(bytes(content))}


def _fork(nonce: int) -> dict:
    txs = [dict(t, max_tokens=60) if t["kind"] == "start" else t for t in script()[nonce - 1]]
    d = signed_diff(nonce, txs)  # the user signs an altered start over the original root
    return {"kind": "signed_diff", "escrow_id": EID, "nonce": nonce, "content": b64(d.content),
            "user_sig": d.user_sig.hex(), "source_host": SOURCE}


# tamper kind -> (the check that catches it, the nonce, a fragment of the reason)
TAMPERS = {
    "flipped bit": ("signed", 10, "user signature recovers to gonka1"),
    "creator mismatch": ("signed", 1, "the escrow creator is " + HOSTS[0]),
    "dropped diff": ("replayed", 12, "nonce 12 is missing: the next diff served is nonce 13"),
    "swapped diffs": ("replayed", 15, "nonce 15 is served after nonce 16: the diffs are out of order"),
    "fork signed by the user": ("replayed", 8, "the diff signs"),
    "forged host signature": ("settled", 34, "signature for slot 0 recovered gonka1"),
    "missing host signature": ("settled", 34, "insufficient quorum: 3 slot votes, need 4"),
    "settlement root mismatch": ("settled", 34, "is not the replayed settlement root"),
}


def tampered(kind: str) -> list[dict]:
    """The fixture's records with one fault of ``kind`` (a key of :data:`TAMPERS`)."""
    recs = records()
    diffs = {r["nonce"]: r for r in recs if r["kind"] == "signed_diff"}
    rest = [r for r in recs if r["kind"] not in ("signed_diff", "settlement", "escrow")]
    escrow, settlement = escrow_record(), settlement_record()
    if kind == "flipped bit":
        diffs[10] = _flip(diffs[10])
    elif kind == "creator mismatch":
        escrow = escrow_record(creator=HOSTS[0])
    elif kind == "dropped diff":
        del diffs[12]
    elif kind == "swapped diffs":
        diffs[15], diffs[16] = {**diffs[16], "nonce": 15}, {**diffs[15], "nonce": 16}
    elif kind == "fork signed by the user":
        diffs[8] = _fork(8)
    elif kind == "forged host signature":
        settlement = settlement_record(settle_msg(keys=[coincurve.PrivateKey.from_int(99), *KEYS[1:]]))
    elif kind == "missing host signature":
        settlement = settlement_record(settle_msg(slots=(0, 1, 3)))
    elif kind == "settlement root mismatch":
        settlement = settlement_record(settle_msg(fees_delta=1))
    else:
        raise AssertionError(kind)
    return [escrow, *rest, *diffs.values(), settlement]

"""Signing and hashing an escrow's log the way the network does, with the devnet's keys (:mod:`indexer.devnet.keys`).

* :class:`Preimages`: the bytes each host-signed message is signed over, per protocol version (the builders of
  :mod:`indexer.verify.signatures`, which the verifier recovers the same way).
* :func:`seal`: replays the generated log through the session rules (:class:`indexer.verify.apply.Session`, every
  host signature recovered from the served bytes) to get each diff's real ``post_state_root``; the user signs
  ``DiffContent{nonce, txs, escrow_id, post_state_root}`` (``BuildDiffContent``, gonka-ai/gonka
  ``devshard/state/machine.go``; the host serves ``{nonce, txs}`` and the root beside it, ``DiffToJSON`` in
  ``devshard/transport/types.go`` @09473fe1). The replay's final records and host stats must equal the devnet's
  reference machine (:mod:`indexer.devnet.state`), or generation fails: the ground truth and the signed state agree.
* :func:`fork`: a lying host's diverging copy of a sealed log.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from indexer.devnet.keys import Keyring
from indexer.verify import apply, diff as vdiff, proto as pb, signatures as sig, state_root as sr
from indexer.wire.diffs import encode_diff


class SealError(RuntimeError):
    """The generated log breaks a session rule, or the replay disagrees with the devnet's reference machine."""


@dataclass(frozen=True)
class Preimages:
    """What each host-signed message of one protocol version is signed over."""
    version: str

    def receipt(self, escrow_id: str, inference_id: int, rec: Any, confirmed_at: int) -> bytes:
        return sig.executor_receipt_bytes(inference_id=inference_id, prompt_hash=rec.prompt_hash, model=rec.model,
                                          input_length=rec.input_length, max_tokens=rec.max_tokens,
                                          started_at=rec.started_at, escrow_id=escrow_id, confirmed_at=confirmed_at)

    def finish(self, msg: dict[str, Any]) -> bytes:
        return sig.finish_bytes(**{k: v for k, v in msg.items() if k != "proposer_sig"})

    def validation(self, msg: dict[str, Any]) -> bytes:
        return sig.validation_bytes(**{k: v for k, v in msg.items() if k != "proposer_sig"})

    def vote(self, msg: dict[str, Any]) -> bytes:
        return sig.validation_vote_bytes(**{k: v for k, v in msg.items() if k != "proposer_sig"})

    def timeout_vote(self, escrow_id: str, inference_id: int, reason: int, accept: bool) -> bytes:
        return sig.timeout_vote_bytes(escrow_id=escrow_id, inference_id=inference_id, reason=reason, accept=accept)

    def error_miss_vote(self, escrow_id: str, inference_id: int, accept: bool, response_hash: bytes) -> bytes:
        # ErrorMissVoteContent{escrow_id, inference_id, accept, response_hash} (F9); without a ported v5 rule set
        # nothing checks it, so the timeout-vote layout with reason 0 stands in
        return sig.timeout_vote_bytes(escrow_id=escrow_id, inference_id=inference_id, reason=0, accept=accept) \
            + pb.f_bytes(5, response_hash)


def preimages_for(version: str) -> Preimages:
    return Preimages(version)


def signed_content(served: bytes, escrow_id: str, root: bytes) -> bytes:
    """The user-signed ``DiffContent`` of a served ``{nonce, txs}`` content: fields 3 and 4 follow in number order,
    which is the deterministic marshal of the whole message."""
    return served + pb.f_str(3, escrow_id) + pb.f_bytes(4, root)


@dataclass
class Sealed:
    """An escrow's log as signed: per diff the served content, root and user signature; the final session."""
    served: list[bytes] = field(default_factory=list)
    roots: list[bytes] = field(default_factory=list)
    user_sigs: list[bytes] = field(default_factory=list)
    session: apply.Session | None = None  # None: the version's session rules are not ported (roots unverifiable)


class _KeptState(sr.State):
    """The session state without a rollback copy: ``Session.apply`` snapshots the state before each diff to undo a
    refused one, but the devnet never continues after a refusal (generation fails), so the copy is skipped. It
    was most of the signing cost."""

    def __deepcopy__(self, memo: dict) -> "_KeptState":
        return self


class _Recording(apply.Session):
    """A session that keeps each record as it is sealed, to compare final statuses with the reference machine."""

    def _seal(self, inference_id: int, nonce: int) -> None:
        self.__dict__.setdefault("sealed_records", {})[inference_id] = copy.deepcopy(self.state.live[inference_id])
        super()._seal(inference_id, nonce)


def open_session(esc: Any, keys: Keyring) -> apply.Session:
    """The escrow's session as its hosts open it: the group, the opening balance and the escrow's parameters; a
    warm key is authorised for a slot when the slot's participant granted it."""
    def warm(slot: int, address: str) -> bool:
        return keys.granter_of(address) == esc.slots[slot]
    session = _Recording.new(esc.escrow_id, esc.session_config, tuple(esc.slots), esc.amount, esc.protocol_version,
                             warm_resolver=warm)
    session.state.__class__ = _KeptState
    return session


def seal(esc: Any, keys: Keyring, diffs: list[dict[str, Any]] | None = None, resign: bool = True) -> Sealed:
    """Replay ``diffs`` (default: the escrow's log) and sign each diff as the escrow's user (``resign`` False: keep
    the escrow's own user signatures, as a host that cannot sign for the user must)."""
    diffs = esc.diffs if diffs is None else diffs
    version, out = esc.protocol_version, Sealed()
    out.session = open_session(esc, keys) if version in apply.MACHINE_VERSIONS else None
    root = sr.sha256(f"devnet-genesis-{esc.escrow_id}".encode())
    for i, d in enumerate(diffs):
        served = encode_diff({"nonce": d["nonce"], "txs": d["txs"]}, version)
        if out.session is None:  # no ported rules: a hash chain over the served contents stands in for the root
            root = sr.sha256(root + served)
        else:
            content = vdiff.read_diff_content(served)
            content.escrow_id = esc.escrow_id
            try:
                root = out.session.apply(d["nonce"], vdiff.decode_txs(content, esc.escrow_id))
            except (apply.ApplyError, vdiff.DiffError) as exc:
                raise SealError(f"escrow {esc.escrow_id}: the generated log breaks a {version} rule: {exc}") from None
        out.served.append(served)
        out.roots.append(root)
        out.user_sigs.append(keys.sign(esc.creator, signed_content(served, esc.escrow_id, root)) if resign
                             else esc.user_sigs[i])
    return out


def check_against_reference(esc: Any, sealed: Sealed) -> None:
    """The replayed session ends in settlement with the reference machine's statuses and host stats."""
    s = sealed.session
    if s is None:
        return
    if s.state.phase != sr.SETTLEMENT:
        raise SealError(f"escrow {esc.escrow_id}: the log ends in phase {s.state.phase}, not settlement")
    records = getattr(s, "sealed_records", {})
    for iid, rec in esc.state.records.items():
        got = records.get(iid)
        if got is None or got.status != rec.status or got.actual_cost != rec.actual_cost:
            raise SealError(f"escrow {esc.escrow_id} inference {iid}: replayed "
                            f"{None if got is None else (got.status, got.actual_cost)}, reference "
                            f"{(rec.status, rec.actual_cost)}")
    for slot, ref in enumerate(esc.state.stats):
        mine = s.state.host_stats[slot]
        if (mine.missed, mine.invalid, mine.cost, mine.required_validations, mine.completed_validations) != (
                ref.missed, ref.invalid, ref.cost, ref.required_validations, ref.completed_validations):
            raise SealError(f"escrow {esc.escrow_id} slot {slot}: replayed host stats {mine}, reference {ref}")


def altered_copy(esc: Any, keys: Keyring) -> tuple[list[dict[str, Any]], int]:
    """A copy of the log with one tx changed and re-signed by its proposer, so the copy still follows the session
    rules: from the middle on (wrapping), the first Finish bills one more output token. Returns (diffs, nonce)."""
    diffs = copy.deepcopy(esc.diffs)
    pre = preimages_for(esc.protocol_version)
    half = len(diffs) // 2
    for d in diffs[half:] + diffs[:half]:
        for tx in d["txs"]:
            if "finish_inference" in tx:
                msg = tx["finish_inference"]
                msg["output_tokens"] += 1
                msg["proposer_sig"] = keys.sign_as_host(esc.slots[msg["executor_slot"]], pre.finish(msg))
                return diffs, d["nonce"]
    raise SealError(f"escrow {esc.escrow_id}: no Finish to alter")


def fork(esc: Any, keys: Keyring, kind: str) -> tuple[list[dict[str, Any]], Sealed, int]:
    """A lying host's log (diffs, sealed, first diverging nonce). ``altered``: one tx changed under the user's
    original signatures (the roots it serves are its own replay), so the user signature fails at that nonce.
    ``fork``: the user signed the altered history too (an equivocating gateway), so every diff verifies and replays,
    and only the settlement, which is the honest one, tells the two apart."""
    if kind not in ("altered", "fork"):
        raise ValueError(f"lying kind {kind!r}: 'altered' or 'fork'")
    diffs, nonce = altered_copy(esc, keys)
    sealed = seal(esc, keys, diffs, resign=kind == "fork")
    return diffs, sealed, nonce

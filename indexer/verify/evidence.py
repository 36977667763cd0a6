"""Checking an evidence bundle (:mod:`indexer.verify.bundle`) with no trust in whoever wrote it.

Three checks in order, each stopping at the first failing nonce with its reason:

1. ``signed``: every diff's user signature over its exact ``DiffContent`` bytes recovers to the escrow creator;
2. ``replayed``: the diffs are nonces 1, 2, … with no gap, repeat or swap, each applies under the session rules
   (:class:`indexer.verify.apply.Session`, every host signature recovered) and the recomputed ``post_state_root``
   equals the signed one at every nonce;
3. ``settled``: the settlement transaction is for this escrow and the last nonce, the final state is in the
   settlement phase and its root is the message's ``state_root``, and the chain's ``VerifyDevshardSettlement``
   (:func:`indexer.verify.settlement.verify_settlement`) accepts it: host signatures reach the quorum of the group.

Then each stated penalty derivation is re-checked against the replayed state (``penalty`` steps). The level reached
is the last of ``none`` < ``signed`` < ``replayed`` < ``settled`` that passed. A protocol version whose session rules
are not ported stops at ``signed`` (replay ``not-checked``, the reason stated), never guessed.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from indexer.verify import (apply, apply_txs, diff, proto as pb, settlement as st, signatures as sig, state_root as sr,
                            versions)
from indexer.verify.bundle import Bundle, Penalty

PASS, FAIL, NOT_CHECKED = "pass", "fail", "not-checked"
MAX_QUOTE = 80  # characters of a value read from the bundle quoted in a reason
LEVELS = ("none", "signed", "replayed", "settled")
STATUS_NAMES = ("pending", "started", "finished", "challenged", "validated", "invalidated", "timed_out")
RECORD_NUMBERS = ("executor_slot", "input_length", "max_tokens", "input_tokens", "output_tokens", "reserved_cost",
                  "actual_cost", "votes_valid", "votes_invalid")
COLD_ONLY = "no warm keys captured for the epoch, so only the slots' own addresses are accepted"
INEXACT = ("the participant's grants were read from live values, not as of the epoch's end, so they neither "
           "authorise nor refute the key: not checked")
# a slot's grants the bundle does not list as the epoch's own (bundle.Host.grants): a key they do not list is not
# thereby shown foreign
GRANT_GAPS = {"none": COLD_ONLY, "live": INEXACT}
NO_RAW_TX = ("settled not shown: the settlement was not read as broadcast (no raw transaction binds its message to "
             "tx {tx}), so the message checked may not be the one the chain settled")
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq,
        "!=": operator.ne}


@dataclass
class Step:
    name: str
    outcome: str
    detail: str
    nonce: int | None = None


@dataclass
class Report:
    escrow_id: str
    steps: list[Step] = field(default_factory=list)
    level: str = "none"
    failed_step: str | None = None
    failed_nonce: int | None = None
    failure: str | None = None
    # of the first failure: (slot address, recovered key) when it is a host signature by a key not known to be the
    # slot's; a grant the bundle does not list would change the answer
    unknown_signer: tuple[str, str] | None = None
    notes: tuple[str, ...] = ()  # the bundle's own notes: what its author could not check

    @property
    def ok(self) -> bool:
        """Settled, and every stated penalty derivation holds."""
        return self.level == "settled" and all(s.outcome == PASS for s in self.steps)

    def to_dict(self) -> dict:
        return {"escrow_id": self.escrow_id, "level": self.level, "ok": self.ok, "failed_step": self.failed_step,
                "failed_nonce": self.failed_nonce, "failure": self.failure, "steps": [asdict(s) for s in self.steps],
                "notes": list(self.notes)}

    def add(self, name: str, outcome: str, detail: str, nonce: int | None = None) -> None:
        self.steps.append(Step(name, outcome, detail, nonce))
        if outcome == PASS and name in LEVELS:
            self.level = name
        elif outcome != PASS and self.failure is None:
            self.failed_step, self.failed_nonce, self.failure = name, nonce, detail


@dataclass
class _Recording(apply.Session):
    """A session that keeps each record as it was sealed, so a penalty can name a sealed inference's status."""
    sealed_records: dict[int, sr.Record] = field(default_factory=dict)

    def _seal(self, inference_id: int, nonce: int) -> None:
        self.sealed_records[inference_id] = apply_txs.clone(self.state.live[inference_id])  # its fields are immutable
        super()._seal(inference_id, nonce)

    def record(self, inference_id: int) -> sr.Record | None:
        live = self.state.live.get(inference_id)
        return live if live is not None else self.sealed_records.get(inference_id)


class _Failed(Exception):
    """A check's outcome other than pass: the nonce it stopped at (None when no nonce applies) and the reason."""

    def __init__(self, nonce: int | None, reason: str, outcome: str = "fail",
                 unknown_signer: tuple[str, str] | None = None):
        super().__init__(reason)
        self.nonce, self.reason, self.outcome, self.unknown_signer = nonce, reason, outcome, unknown_signer


def _claimed_nonce(d) -> int:
    try:
        return diff.read_diff_content(d.content).nonce
    except (diff.DiffError, pb.ProtoError):
        return d.nonce


def check_signed(b: Bundle, memo: sig.Recoveries | None = None) -> str:
    """Every diff passes the hosts' user-signature check (:func:`indexer.verify.diff.check_user_signed`: the
    signature recovers to the creator, over bytes that are the deterministic encoding of a diff of this escrow). The
    same for every protocol version: ``DiffContent`` has no domain tag (gonka-ai/gonka
    ``devshard/types/signed_preimage.go`` @0d660980 tags only validation, vote and timeout/error-miss vote
    preimages). Inside the prefix ``memo`` vouches for, the encoding and escrow checks are not made again."""
    recover = sig.recover_address if memo is None else memo.address
    for position, d in enumerate(b.diffs):
        if memo is not None:
            memo.at(position)
        # inside the vouched prefix these bytes passed this verifier's every check before (its memo's terms)
        vouched = memo is not None and position < memo.prefix
        try:
            diff.check_user_signed(d.content, d.user_sig, b.creator, b.escrow_id, recover, encoding=not vouched)
        except diff.DiffError as exc:
            raise _Failed(_claimed_nonce(d), str(exc)) from None
    return f"{len(b.diffs)} diffs signed by the creator {b.creator}"


def _order_problem(b: Bundle, position: int, found: int, expected: int) -> _Failed:
    if found < expected:
        return _Failed(found, f"nonce {found} is served again after nonce {expected - 1}")
    later = [_claimed_nonce(d) for d in b.diffs[position + 1:]]
    if expected in later:
        return _Failed(expected, f"nonce {expected} is served after nonce {found}: the diffs are out of order")
    return _Failed(expected, f"nonce {expected} is missing: the next diff served is nonce {found}")


def check_replayed(b: Bundle, memo: sig.Recoveries | None = None,
                   seen: Callable[[int, list[dict]], None] | None = None) -> tuple[str, _Recording]:
    """Replay the diffs in order; ``seen`` is handed each applied diff's nonce and decoded txs."""
    recover = sig.recover_address if memo is None else memo.address
    warm = {h.slot: set(h.warm_keys) for h in b.group}
    try:
        session = _Recording.new(b.escrow_id, b.config, tuple(h.address for h in b.group), b.amount,
                                 b.protocol_version, warm_resolver=lambda slot, address: address in warm.get(slot, ()))
    except sr.UnsupportedVersion as exc:
        raise _Failed(None, f"protocol version {b.protocol_version!r} is not supported by this verifier ({exc}): "
                            f"replay not attempted", NOT_CHECKED) from None
    except versions.NotCheckable as exc:
        raise _Failed(None, f"not checkable by this verifier: {exc}", NOT_CHECKED) from None
    except apply.ApplyError as exc:
        raise _Failed(None, f"the session cannot open: {exc}") from None
    session.recover = recover
    for position, d in enumerate(b.diffs):
        if memo is not None:
            memo.at(position)
        expected = session.latest_nonce + 1
        try:
            content = diff.read_diff_content(d.content, b.protocol_version)
        except (diff.DiffError, pb.ProtoError) as exc:
            raise _Failed(d.nonce, f"DiffContent unreadable: {exc}") from None
        if content.nonce != expected:  # the signed nonce decides the order; a wrong listing is named after it
            raise _order_problem(b, position, content.nonce, expected)
        if content.nonce != d.nonce:
            raise _Failed(content.nonce, f"the bundle lists this diff as nonce {d.nonce}, its signed content says "
                                         f"{content.nonce}")
        try:
            # the replay ends at the first refusal, so no diff needs undoing: the cheap path
            txs = diff.decode_txs(content, b.escrow_id, b.protocol_version, recover)
            root = session.apply(content.nonce, txs, rollback=False)
        except versions.NotCheckable as exc:
            raise _Failed(content.nonce, f"not checkable by this verifier: {exc}", NOT_CHECKED) from None
        except (diff.DiffError, apply.ApplyError, pb.ProtoError, ValueError) as exc:
            raise _Failed(content.nonce, f"refused by the session rules: {exc}",
                          unknown_signer=getattr(exc, "unknown_signer", None)) from None
        if root != content.post_state_root:
            raise _Failed(content.nonce, f"recomputed post_state_root {root.hex()}, the diff signs "
                                         f"{content.post_state_root.hex()}")
        if seen is not None:
            seen(content.nonce, txs)
    return f"nonces 1..{session.latest_nonce} replayed, every post_state_root recomputed and equal", session


def check_settled(b: Bundle, session: _Recording) -> str:
    s = b.settlement
    final = session.latest_nonce
    if s is None:
        gap = b.settlement_missing
        if gap is not None:
            raise _Failed(None, gap.reason, FAIL if gap.fails else NOT_CHECKED)
        raise _Failed(None, "the bundle holds no settlement transaction", NOT_CHECKED)
    try:
        msg = st.decode_settle_msg(s.msg)
    except pb.ProtoError as exc:
        raise _Failed(None, f"MsgSettleDevshardEscrow unreadable: {exc}") from None
    if str(msg.escrow_id) != b.escrow_id:
        raise _Failed(msg.nonce, f"the settlement is for escrow {msg.escrow_id}, the diffs for {b.escrow_id!r}")
    if msg.nonce != final:
        raise _Failed(msg.nonce, f"the settlement is at nonce {msg.nonce}, the diffs end at nonce {final}")
    if msg.version != b.protocol_version:  # the root hosts sign hashes the session's version (state/hash.go)
        raise _Failed(final, f"the settlement's version {msg.version[:MAX_QUOTE]!r} is not the escrow's protocol "
                             f"version {b.protocol_version!r}: the root it settles is not the replayed session's")
    if session.state.phase != sr.SETTLEMENT:
        raise _Failed(final, f"the final state is in phase {session.state.phase}, not settlement ({sr.SETTLEMENT})")
    if msg.state_root != session.root():
        raise _Failed(final, f"the settlement root {msg.state_root.hex()} is not the replayed settlement root "
                             f"{session.root().hex()}")
    escrow = st.Escrow(escrow_id=msg.escrow_id, creator=b.creator, amount=b.amount,
                       slots=tuple(h.address for h in b.group), max_nonce=s.max_nonce,
                       approved_versions=s.approved_versions)
    warm = {}
    for h in b.group:
        warm.setdefault(h.address, set()).update(h.warm_keys)
    try:
        check = st.verify_settlement(msg, escrow, lambda granter, grantee: grantee in warm.get(granter, ()))
    except st.SettlementError as exc:
        raise _Failed(final, f"the chain would refuse the settlement: {exc}",
                      unknown_signer=exc.unknown_signer) from None
    # the height is the bundle's word: nothing in the transaction's bytes names the block it landed in
    where = f"{_transaction(s)} at height {f'{s.height} (as stated)' if s.height is not None else '(not given)'}"
    if s.tx_raw is None:  # every check passed on a message nothing binds to the transaction the chain settled
        raise _Failed(None, NO_RAW_TX.format(tx=s.tx_hash or "(hash not given)")
                      + (f"; read from: {s.read_from}" if s.read_from else ""), NOT_CHECKED)
    return (f"root {check.root.hex()} at nonce {final}; {check.votes} slot signatures, quorum {check.quorum} of "
            f"{len(escrow.slots)}; {where}")


def _transaction(s) -> str:
    """Which transaction carried the settlement: its hash as stated, or checked against the raw transaction."""
    if s.tx_raw is None:
        return f"tx {s.tx_hash or '(hash not given)'} (hash as stated, no raw transaction to check it)"
    try:
        carried = st.settle_msgs_in_tx(s.tx_raw)
    except pb.ProtoError as exc:
        raise _Failed(None, f"the raw settlement transaction is unreadable: {exc}") from None
    if s.msg not in carried:
        raise _Failed(None, f"the raw transaction carries {len(carried)} settlement message(s), none of them this one")
    computed = st.tx_hash(s.tx_raw)
    if s.tx_hash is not None and s.tx_hash.upper() != computed:
        raise _Failed(None, f"the raw transaction hashes to {computed}, the bundle says {s.tx_hash}")
    return f"tx {computed} (hash of the raw transaction, which carries this message)"


def check_penalty(p: Penalty, session: _Recording) -> str:
    record = session.record(p.inference_id)
    if record is None:
        raise _Failed(None, f"inference {p.inference_id} is not in the replayed state")
    status = STATUS_NAMES[record.status] if 0 <= record.status < len(STATUS_NAMES) else str(record.status)
    if status != p.status:
        raise _Failed(None, f"inference {p.inference_id} is {status} in the replayed state, the bundle says {p.status}")
    for name, value in p.numbers.items():
        if name in RECORD_NUMBERS and getattr(record, name) != value:
            raise _Failed(None, f"{name} is {getattr(record, name)} in the replayed record, the bundle says {value}")
    total = sum(p.numbers[t] for t in p.sum)
    holds = _OPS[p.compare](total, p.numbers[p.against])
    arithmetic = (f"{' + '.join(f'{t} {p.numbers[t]}' for t in p.sum)} = {total} {p.compare} {p.against} "
                  f"{p.numbers[p.against]} is {str(holds).lower()}")
    if holds != p.holds:
        raise _Failed(None, f"{arithmetic}, the bundle says {str(p.holds).lower()}")
    src = p.limit_source
    origin = ", ".join(f"{k} {src[k]}" for k in ("parameter", "epoch", "height", "source") if src.get(k) is not None)
    return (f"{p.rule}: inference {p.inference_id} {status}; {arithmetic}"
            f"{'; limit as stated: ' + origin if origin else ''}")


def _grant_gap(b: Bundle, unknown_signer: tuple[str, str] | None) -> str | None:
    """Why a signature by a key the slot's listed grants do not hold is not a failure: the participant's grants were
    not read, or only from live values (bundle.Host.grants); None when the listed grants are the epoch's own."""
    if unknown_signer is None:
        return None
    kinds = {h.grants for h in b.group if h.address == unknown_signer[0]}
    return next((GRANT_GAPS[k] for k in ("none", "live") if k in kinds), None)


def verify_bundle(b: Bundle, recoveries: sig.Recoveries | None = None,
                  seen: Callable[[int, list[dict]], None] | None = None) -> Report:
    """Run every check on ``b``; the report lists each step with its outcome and the first failure. The diffs'
    signatures (the user's and those inside txs) are recovered through ``recoveries`` when given: a memo the caller
    vouches for over the log's first diffs, and which keeps every recovery made (the report is the same either
    way). ``seen`` gets each diff the replay applied, as (nonce, decoded txs)."""
    report = Report(b.escrow_id, notes=b.notes)
    session = None
    for name in ("signed", "replayed", "settled"):
        if report.failure is not None:
            report.add(name, NOT_CHECKED, f"not checked: {report.failed_step} did not pass")
            continue
        try:
            if name == "signed":
                report.add(name, PASS, check_signed(b, recoveries))
            elif name == "replayed":
                detail, session = check_replayed(b, recoveries, seen)
                report.add(name, PASS, detail)
            else:
                report.add(name, PASS, check_settled(b, session))
        except _Failed as exc:
            outcome, reason = exc.outcome, exc.reason
            if report.failure is None:
                report.unknown_signer = exc.unknown_signer
                gap = _grant_gap(b, exc.unknown_signer)
                if gap is not None:
                    outcome, reason = NOT_CHECKED, f"{reason} ({gap})"
            report.add(name, outcome, reason, exc.nonce)
    for p in b.penalties:
        if session is None:
            report.add("penalty", NOT_CHECKED, f"{p.rule}: inference {p.inference_id}: not checked without a replay")
            continue
        try:
            report.add("penalty", PASS, check_penalty(p, session))
        except _Failed as exc:
            report.add("penalty", FAIL, f"{p.rule}: inference {p.inference_id}: {exc.reason}")
    return report

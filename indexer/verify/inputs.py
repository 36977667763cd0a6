"""What a session replay needs, read from an escrow's normalized record (interface.md §2, kind ``escrow``).

The poller (from the chain's ``devshard_escrow`` answer, normalized), the verification stage (from ``rec.escrow``)
and an evidence bundle all start a :class:`indexer.verify.apply.Session` from the same fields, so they read them
here: the slots, the creator, the amount (opening balance), the protocol version and the session config the escrow
was created with (``DevshardEscrow``: token_price, create_devshard_fee, fee_per_nonce, inference_seal_grace_nonces,
inference_seal_grace_seconds, auto_seal_every_n_nonces, vote_threshold_factor).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the replay imports vote_threshold from here without the session machine and its secp256k1
    from indexer.verify.apply import Config


def vote_threshold(group_size: int, factor: int | None) -> int:
    """The votes a side must exceed (gonka-devshard.md §3.1): factor 0 or unset means half; integer floor."""
    if not factor:
        return group_size // 2
    return (group_size * factor) // 100


@dataclass(frozen=True)
class SessionInputs:
    escrow_id: str
    version: str
    creator: str
    balance: int
    slots: tuple[str, ...]
    config: Config


# record field -> Config field; every one is needed (no protocol default is assumed for a missing value)
_CONFIG = (("token_price", "token_price"), ("inference_seal_grace_nonces", "seal_grace_nonces"),
           ("inference_seal_grace_seconds", "seal_grace_seconds"), ("auto_seal_every_n_nonces", "auto_seal_every"),
           ("fee_per_nonce", "fee_per_nonce"), ("create_devshard_fee", "create_fee"))


# A config field the chain publishes as 0 means "the compiled default" (gonka-devshard.md §4.6): upstream builds the
# session config from DefaultSessionConfig and overlays only non-zero escrow fields (gonka-ai/gonka
# devshard/types/config.go @d4411ed0 SessionConfigFromEscrow, NormalizeSessionConfig). The defaults below are the
# ones that file compiles in (TokenPrice 1, "0 is treated as 1"; DefaultInferenceSealGraceSeconds 3600 and
# DefaultAutoSealEveryNNonces 150, both "must match inference-chain"). inference_seal_grace_nonces has no default
# shown for every build (max(group size × a multiplier, 20); the multiplier and a live overlay differ between
# versions of that file): 0 stays unknown (None), and a replay whose rules seal says it cannot be checked.
# execution_timeout 0 is not stated: the epoch's governance value stands in, as the live overlay at bind does
# (ApplyLiveSessionParams overlays it when > 0). The fees are replayed as published, 0 included: builds of the fee
# era freeze both fees onto DevshardEscrow when it is created (SessionConfigFromEscrow maps a 0 to 10,000 / 1,000,
# devshard/types/config.go @056f1980), so a 0 is published only by escrows of the line before fees, whose sessions
# charged none (DefaultSessionConfigV0211 in an earlier version of the same file: "the legacy v0.2.11 session
# config without fees"); the v4.1 release fixture's sessions charge none too.
COMPILED_DEFAULTS = {"token_price": 1, "inference_seal_grace_seconds": 3600, "auto_seal_every_n_nonces": 150}
FIELDS_WITHOUT_DEFAULT = ("inference_seal_grace_nonces",)


def _config_value(escrow: Mapping[str, Any], name: str) -> int | None:
    """A config field as the session uses it: the published value, or for 0 the compiled default (None: not known)."""
    value = int(escrow[name])
    if value != 0 or name not in (*COMPILED_DEFAULTS, *FIELDS_WITHOUT_DEFAULT):
        return value
    return COMPILED_DEFAULTS.get(name)


def _seconds(value: Any) -> int | None:
    """A duration as the chain's JSON writes it: an integer, a decimal string, or a Go duration in whole seconds
    ("1920s"); None when absent or of another form."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    text = str(value).strip()
    text = text[:-1] if text.endswith("s") else text
    return int(text) if text.isdigit() else None


def session_inputs(escrow: Mapping[str, Any], escrow_params: Mapping[str, Any] | None = None) -> SessionInputs | str:
    """The inputs of ``escrow``'s session, or a one-line reason naming what the record lacks (then the log can
    be checked for signatures at most: its roots cannot be recomputed without them). ``escrow_params`` is the
    epoch's ``devshard_escrow_params`` (rec.epoch_params): v5's seal clock adds its ``execution_timeout`` when the
    escrow record does not carry one; without either, a v5 replay says it cannot be checked."""
    missing = [name for name in ("creator", "amount", "protocol_version", "slots", *(f for f, _ in _CONFIG))
               if escrow.get(name) in (None, "", [])]
    if missing:
        return f"escrow {escrow.get('escrow_id')}: not captured: {', '.join(missing)}"
    from indexer.verify.apply import Config

    slots = tuple(escrow["slots"])
    timeout = _seconds(escrow.get("execution_timeout")) or None  # 0: not stated for this escrow
    if timeout is None and escrow_params:
        timeout = _seconds(escrow_params.get("execution_timeout")) or None
    config = Config(vote_threshold=vote_threshold(len(slots), escrow.get("vote_threshold_factor")),
                    execution_timeout=timeout, **{field: _config_value(escrow, name) for name, field in _CONFIG})
    return SessionInputs(str(escrow["escrow_id"]), str(escrow["protocol_version"]), str(escrow["creator"]),
                         int(escrow["amount"]), slots, config)

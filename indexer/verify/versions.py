"""What each devshard protocol version name means to this verifier, in one place: the state-root composition of its
binaries (:func:`composition`) and the session rules it follows (:func:`rules_for`, a :class:`Rules` per line). A
name is the one the chain's ``approved_versions`` carries and the binary hashes into every root (``make devshardd-build
DEVSHARD_VERSION=<name>``, "same as approved_versions.name": ``devshard/types/domain.go`` @4e58fa3b). A name with no
entry is refused (:class:`UnsupportedVersion`), never replayed or hashed under another name's rules.

Lines whose rules are ported (gonka-ai/gonka ``devshard/state/``):

``v1``    ``machine.go`` / ``hash.go`` / ``composition.go`` @01dfd416 (``types.DefaultStateRootVersion = "v1"``,
          ``useV2StateRootComposition = false``; mainnet epoch 272 escrows settled as v1): DevshardTx 1–8 with the
          v4.1 tx rules; no sealing enters the root (``applyCore`` has no auto-seal, ``SealInference`` is a host-local
          eviction that keeps every committed entry, the settlement drain is a no-op under this composition), so every
          record ever started stays in the flat ``live_hash`` with its last status. ``BuildDiffContent`` signs 4
          fields: no field 5. A host's eviction is not in the log, so a confirm, finish or timeout that a host would
          refuse on a record it had evicted is applied here (the root is the same either way for what was applied).
``v4.1``  ``machine.go`` / ``seal.go`` @bb34d444 (the release fixture of ``testdata/v41-state-roots.json``): DevshardTx
          1–8; a still-Pending record is refunded at the settlement drain; a Finished record seals once the state clock
          is ``seal_grace_seconds`` past its ``confirmed_at``.
``v5``    ``machine.go`` / ``heightsync.go`` / ``hash.go`` @c6c474aa and ``seal.go`` @0998aad5 (the same
          ``ComputeRestHashV2(..., HeightSyncEscrowCommitFromState)`` line): + ``force_height_sync_turn`` (9),
          ``heartbeat`` (10), ``height_ack`` (11) and ``error_miss`` (14); the height-sync commit enters the rest hash;
          a Pending record is paid its reservation at the drain (``settleLiveRecordLocked``); a Finished record waits
          ``seal_grace_seconds + execution_timeout`` (``FinishedClockRequiredSeconds``); a start or confirm carrying a
          block-hash stamp writes ``started_at_height`` / ``confirmed_at_height`` into the record, and the executor
          receipt signs the confirm's stamp. ``DiffContent`` has no field 5 (``diff.proto`` @27fd7d3d).

Names that follow a ported line (:data:`ALIASES`), each hashing its own name into the root:

``v4.2``   the v4.1 rules: ``devshard/docs/refusal-snapshots.md`` @f04be240 ("Refusal snapshot catch-up (v4.2)" adds
           refusal packages and ``GET /sessions/:id/state`` only; "State roots and transaction signatures stay the
           same"; "Deploy this as v4.2 … Set the protocol version at build time").
``v5.0.N`` the v5 rules: ``docs/release-branches.md`` (devshard section): ``release/devshard/v5.0.x`` are hotfix tags of
           the live v5 protocol on its maintenance branch ``devshard/v5``; a protocol ships several binaries
           (``devshard/cmd/devshardd/main.go``: "Same protocol can ship multiple binaries"), which must agree on
           every root of a shared session.

Names the network has used whose session rules are refused (:data:`NOT_PORTED` says why in each refusal): ``v2``,
``v3``, ``v4``; no replay claims them.

What no stored upstream file shows, and is therefore refused when an escrow needs it rather than guessed: the
``InferenceRecordProto`` numbers of the two v5 height fields (every stored ``state.proto`` / ``state.pb.go`` stops at
17 ``validated_by``) and the ``ExecutorReceiptContent`` numbers of the confirm's stamp (``diff.proto`` @27fd7d3d stops at
8 ``confirmed_at``). A v5 escrow whose starts and confirms carry no stamp replays in full; one that stamps stops at
``signed`` with a message naming the missing numbers, unless the caller names them (:func:`with_height_fields`).
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass


class NotCheckable(ValueError):
    """Evidence this verifier cannot judge either way (a rule not ported, an input not stated): checked no further,
    and never counted as a failure of the evidence (unknown is not false)."""


class UnsupportedVersion(NotCheckable):
    """A protocol version (or a feature of one) whose hashing or rules are not ported."""


BASE_KINDS = frozenset({"start", "confirm_start", "finish", "validation", "validation_vote", "timeout", "finalize"})
HEIGHT_SYNC_KINDS = frozenset({"force_height_sync_turn", "heartbeat", "height_ack"})

# line -> (sealed-accumulator wrapper, height-sync term) of its root
COMPOSITION: dict[str, tuple[bool, bool]] = {
    "v1": (False, False),  # machine.go computeStateRootLocked with effectiveV2Composition() false
    "v4.1": (True, False),  # seal.go @bb34d444 computeStateRootLocked; the release vectors
    "v5": (True, True),  # hash.go @c6c474aa ComputeRestHashV2(..., heightSync)
}
ALIASES: dict[str, str] = {"v4.2": "v4.1"}  # name -> the line it follows (evidence in the module text)
_V5_HOTFIX = re.compile(r"v5\.0\.(0|[1-9][0-9]{0,5})")


@dataclass(frozen=True)
class Rules:
    line: str  # the rules' own name (the line they were ported from)
    source: str  # upstream file@commit the rules follow
    kinds: frozenset[str]  # DevshardTx kinds the line applies
    seals: bool  # records are sealed into the accumulator (auto-seal each interval, all at the settlement drain)
    drain_pays_pending: bool  # settlement drain: Pending -> Finished at its reservation (else refunded, TimedOut)
    clock_adds_execution_timeout: bool  # a Finished record's clock gate is grace + ExecutionTimeout
    height_sync: bool  # the height-sync escrow commit is kept (and hashed)
    diff_sealed_ids: bool  # DiffContent field 5 (sealed_inference_ids) exists
    # InferenceRecordProto numbers of (started_at_height, confirmed_at_height); None = not established
    record_height_fields: tuple[int, int] | None = None
    # ExecutorReceiptContent numbers of (observed_height, observed_block_hash); None = not established
    receipt_height_fields: tuple[int, int] | None = None
    stamps: bool = False  # starts and confirms may carry a block-height stamp that the record keeps


V1 = Rules(line="v1", source="devshard/state/machine.go, hash.go, composition.go @01dfd416", kinds=BASE_KINDS,
           seals=False, drain_pays_pending=False, clock_adds_execution_timeout=False, height_sync=False,
           diff_sealed_ids=False)
V41 = Rules(line="v4.1", source="devshard/state/machine.go, seal.go @bb34d444", kinds=BASE_KINDS, seals=True,
            drain_pays_pending=False, clock_adds_execution_timeout=False, height_sync=False, diff_sealed_ids=True)
V5 = Rules(line="v5", source="devshard/state/machine.go, heightsync.go @c6c474aa; seal.go @0998aad5",
           kinds=BASE_KINDS | HEIGHT_SYNC_KINDS | {"error_miss"}, seals=True, drain_pays_pending=True,
           clock_adds_execution_timeout=True, height_sync=True, diff_sealed_ids=False, stamps=True)

# line -> its session rules
VERSIONS: dict[str, Rules] = {"v1": V1, "v4.1": V41, "v5": V5}
# names the network has used whose rules are not ported, and why (said in every refusal)
NOT_PORTED: dict[str, str] = {
    "v2": "v2 is the compiled default name of builds whose composition was a compile-time constant "
          "(composition.go @01dfd416, useV2StateRootComposition = false), so the name fixes neither rules nor root",
    "v3": "no machine.go or seal.go of the v3 release line is identified among the stored upstream versions, and no "
          "v3 vectors exist",
    "v4": "no machine.go or seal.go of the v4 release line is identified among the stored upstream versions, and no "
          "v4 vectors exist (v4.1 is a later, separately named line)",
}


@functools.lru_cache(maxsize=256)  # asked for every diff and tx; a network uses a handful of names
def line_of(version: str) -> str:
    """The line a version name follows: itself, or the line :data:`ALIASES` (or a v5.0.N hotfix name) maps it to."""
    if _V5_HOTFIX.fullmatch(version):
        return "v5"
    return ALIASES.get(version, version)


def ported_names() -> str:
    return ", ".join([*VERSIONS, *ALIASES, "v5.0.N"])


def composition(version: str) -> tuple[bool, bool]:
    """(sealed-accumulator wrapper, height-sync term) of the roots a binary of ``version`` computes."""
    try:
        return COMPOSITION[line_of(version)]
    except KeyError:
        raise UnsupportedVersion(f"state root composition of protocol version {version!r} is not established; "
                                 f"known: {', '.join([*COMPOSITION, *ALIASES, 'v5.0.N'])} (name one with "
                                 f"State.composition)") from None


def rules_for(version: str) -> Rules:
    try:
        return VERSIONS[line_of(version)]
    except KeyError:
        why = f": {NOT_PORTED[version]}" if version in NOT_PORTED else ""
        raise UnsupportedVersion(f"the session rules of protocol version {version!r} are not ported{why} (ported: "
                                 f"{ported_names()})") from None


def with_height_fields(rules: Rules, record: tuple[int, int], receipt: tuple[int, int]) -> Rules:
    """``rules`` with the field numbers of the v5 height stamps named by the caller (an assumption the caller owns:
    no stored upstream proto shows them), e.g. to test which numbers reproduce a signed root."""
    if not rules.stamps:
        raise UnsupportedVersion(f"the {rules.line} rules keep no block-height stamps")
    return dataclasses.replace(rules, record_height_fields=record, receipt_height_fields=receipt)

"""Which session rules each protocol version name follows, as data: :class:`Rules` says how a line of the devshard
state machine differs, and :data:`VERSIONS` maps every name this verifier accepts to the rules it follows, with the
upstream file and commit that shows it. A name missing here is refused (:class:`UnsupportedVersion`), never replayed
under another version's rules.

Lines (gonka-ai/gonka ``devshard/state/``):

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

What no stored upstream file shows, and is therefore refused when an escrow needs it rather than guessed: the
``InferenceRecordProto`` numbers of the two v5 height fields (every stored ``state.proto`` / ``state.pb.go`` stops at
17 ``validated_by``) and the ``ExecutorReceiptContent`` numbers of the confirm's stamp (``diff.proto`` @27fd7d3d stops at
8 ``confirmed_at``). A v5 escrow whose starts and confirms carry no stamp replays in full; one that stamps stops at
``signed`` with a message naming the missing numbers, unless the caller names them (:func:`with_height_fields`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from indexer.verify.state_root import UnsupportedVersion

BASE_KINDS = frozenset({"start", "confirm_start", "finish", "validation", "validation_vote", "timeout", "finalize"})
HEIGHT_SYNC_KINDS = frozenset({"force_height_sync_turn", "heartbeat", "height_ack"})


@dataclass(frozen=True)
class Rules:
    line: str  # the rules' own name (the line they were ported from)
    source: str  # upstream file@commit the rules follow
    kinds: frozenset[str]  # DevshardTx kinds the line applies
    drain_pays_pending: bool  # settlement drain: Pending -> Finished at its reservation (else refunded, TimedOut)
    clock_adds_execution_timeout: bool  # a Finished record's clock gate is grace + ExecutionTimeout
    height_sync: bool  # the height-sync escrow commit is kept (and hashed)
    diff_sealed_ids: bool  # DiffContent field 5 (sealed_inference_ids) exists
    # InferenceRecordProto numbers of (started_at_height, confirmed_at_height); None = not established
    record_height_fields: tuple[int, int] | None = None
    # ExecutorReceiptContent numbers of (observed_height, observed_block_hash); None = not established
    receipt_height_fields: tuple[int, int] | None = None
    stamps: bool = False  # starts and confirms may carry a block-height stamp that the record keeps


V41 = Rules(line="v4.1", source="devshard/state/machine.go, seal.go @bb34d444", kinds=BASE_KINDS,
            drain_pays_pending=False, clock_adds_execution_timeout=False, height_sync=False, diff_sealed_ids=True)
V5 = Rules(line="v5", source="devshard/state/machine.go, heightsync.go @c6c474aa; seal.go @0998aad5",
           kinds=BASE_KINDS | HEIGHT_SYNC_KINDS | {"error_miss"}, drain_pays_pending=True,
           clock_adds_execution_timeout=True, height_sync=True, diff_sealed_ids=False, stamps=True)

# version name (the tag the session binds and hashes into every root) -> the rules it follows
VERSIONS: dict[str, Rules] = {
    "v4.1": V41,
    "v5": V5,
}


def rules_for(version: str) -> Rules:
    try:
        return VERSIONS[version]
    except KeyError:
        raise UnsupportedVersion(f"the session rules of protocol version {version!r} are not ported (ported: "
                                 f"{', '.join(VERSIONS)}); its roots can still be hashed from a State") from None


def with_height_fields(rules: Rules, record: tuple[int, int], receipt: tuple[int, int]) -> Rules:
    """``rules`` with the field numbers of the v5 height stamps named by the caller (an assumption the caller owns:
    no stored upstream proto shows them), e.g. to test which numbers reproduce a signed root."""
    if not rules.stamps:
        raise UnsupportedVersion(f"the {rules.line} rules keep no block-height stamps")
    return dataclasses.replace(rules, record_height_fields=record, receipt_height_fields=receipt)

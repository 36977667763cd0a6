"""What a settled escrow's settlement says, and how the poller reads it: the settlement event (tx_search), the
settlement transaction, and the nonce that ends the settled log (gonka-devshard.md §4.8), against which each
member's shard detail is held. :class:`SettledReads` is a part of :class:`indexer.poller.fetch.EscrowFetcher`."""
from __future__ import annotations

from dataclasses import dataclass

from indexer.poller.payloads import FailureReport
from indexer.sources.gonka import FetchError, Gonka, HostGroup
from indexer.sources.gonka.settlements import read_settlement
from indexer.wire.normalize import NormalizeError, parse_u64
from indexer.wire.rpc import TxEvent


@dataclass(frozen=True)
class Settlement:
    """What an escrow's settlement event says (tx_search): its protocol version, the height it settled at and the
    transaction that settled it. The height orders settlements, which is the order the chain applies each escrow's
    results to its hosts' SPRT; the transaction carries what the settled check needs (a ``settlement`` record)."""
    version: str
    height: int | None
    tx_hash: str = ""


# The settlement event's attribute that names the protocol version, newest chain first: ``state_root_and_protocol_version``
# (gonka-ai/gonka inference-chain/x/inference/keeper/msg_server_settle_devshard_escrow.go @
# 06b2589a16e291c750d68a024c83289b52fe479e); chains whose MsgSettleDevshardEscrow still named the field ``version``
# (keeper/devshard_settlement.go @ 1529fbc1538e4066e50ee1177f73f474d46277fa checks ``msg.Version``) emit
# ``block_height, block_time, version`` instead, as the epoch-272 mainnet events do (version "v1").
VERSION_ATTRIBUTES = ("state_root_and_protocol_version", "version")


def event_version(attributes: dict[str, str]) -> str:
    """The protocol version a settlement event names, "" when it names none this reader knows (the hosts are then
    asked which version the session is bound to, as for an unsettled escrow)."""
    for key in VERSION_ATTRIBUTES:
        value = (attributes.get(key) or "").split(":")[0].strip()
        if value:
            return value if value.startswith("v") else ""
    return ""


def settlements_from(events: list[TxEvent]) -> dict[str, Settlement]:
    """escrow_id → its settlement, from ``devshard_escrow_settled`` events (tx_search): the protocol version the
    event names (:func:`event_version`), the tx height and hash. An event is kept whatever its version attribute
    says: its height orders the restitution and its transaction carries the settlement record."""
    out = {}
    for ev in events:
        escrow_id = (ev.attributes.get("escrow_id") or "").strip()
        if escrow_id:
            out[escrow_id] = Settlement(event_version(ev.attributes), ev.height, ev.tx_hash)
    return out

class SettledReads:
    """The settlement reads of an escrow fetcher (``g``: the endpoints; ``report_failure``: net.failure)."""
    g: Gonka
    report_failure: FailureReport

    def _settlement(self, escrow_id: str) -> Settlement | None:
        """The settlement of an escrow the chain reports settled although the cycle's settlement search (read at
        the cycle's start) did not list it: it settled since, as escrows do all through an epoch. Its own search;
        None (said in net.failure) when that fails or finds nothing yet. An escrow settled without a known height
        is not final (:meth:`_escrow_log`): its height orders the restitution's SPRT steps."""
        try:
            found = settlements_from(self.g.rpc.escrow_settled(escrow_id)).get(escrow_id)
        except (FetchError, NormalizeError) as exc:
            self.report_failure(f"escrow:{escrow_id}", getattr(exc, "url", "") or "tx_search",
                                f"settlement height unknown: {exc}", getattr(exc, "transient", True))
            return None
        if found is None:
            self.report_failure(f"escrow:{escrow_id}", "tx_search", "settled on chain, but tx_search has no "
                                "settlement event for it yet: not final until its height is known", True)
        return found

    def _settlement_tx(self, escrow_id: str, settlement: Settlement) -> dict | None:
        """The escrow's ``settlement`` record, read from its transaction (:mod:`indexer.sources.gonka.settlements`);
        None (said in net.failure, with both reasons) while no node serves it: the escrow then stays pending and the
        next cycle reads again, until it is read or the chain prunes the escrow (then it is recorded as lost)."""
        try:
            return read_settlement(self.g.rpc, self.g.chain, escrow_id, settlement.tx_hash, settlement.height)
        except FetchError as exc:
            self.report_failure(f"escrow:{escrow_id}", exc.url, str(exc), True)
            return None

    def _settled_tip(self, escrow_id: str, settled_tx: dict, tip: int | None, reporter: str | None) -> int | None:
        """Where a settled escrow's log ends: the nonce its settlement names (the state a quorum of the group signed,
        gonka-devshard.md §4.8), not the nonce one member's shard detail reports. A member reporting another nonce
        would end the capture short of the settled log, marked final with its tail never read, or past it, never
        complete: it is recorded against that member. A settlement without a nonce leaves the member's tip."""
        named = settled_tx.get("nonce")
        if named is None:
            return tip
        named = parse_u64(named, "nonce")
        if tip is not None and tip != named and reporter is not None:
            self.report_failure(f"host:{reporter}", f"escrow:{escrow_id}",
                                f"shard detail of escrow {escrow_id} reports nonce {tip}, but its settlement names "
                                f"nonce {named}: the log is read to the settlement's", False)
        return named

    @staticmethod
    def _settled_detail(group: HostGroup, version: str, escrow_id: str, nonce: int,
                        reporter: str | None) -> tuple[dict | None, FetchError | None]:
        """A shard detail naming the settled ``nonce``, from a member other than ``reporter`` (whose detail named
        another, recorded by :meth:`_settled_tip`); (None, why) when no member gives one."""
        def settled(host) -> dict:
            found = host.shard_detail(version, escrow_id)
            said = found.get("nonce")
            if said is None or parse_u64(said, "nonce") != nonce:
                raise FetchError(f"escrow:{escrow_id}", f"shard detail of escrow {escrow_id} reports nonce {said}, "
                                 f"but its settlement names nonce {nonce}", transient=False)
            return found
        was_bad = reporter in group.bad
        if reporter is not None:
            group.bad.add(reporter)
        try:
            return group.call(settled)[0], None
        except FetchError as exc:
            return None, FetchError(f"escrow:{escrow_id}", f"no member's shard detail names the settled nonce "
                                    f"{nonce}: {exc}", transient=True)
        finally:
            if reporter is not None and not was_bad:
                group.bad.discard(reporter)  # its log may still be taken: every diff of it is checked

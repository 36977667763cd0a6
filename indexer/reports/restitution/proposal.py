"""The governance proposal paying the amounts to restitute: a ``MsgSubmitProposal`` JSON (the file
``<chain binary> tx gov submit-proposal`` reads) with one ``/inference.streamvesting.MsgBatchTransferWithVesting``
message from the gov module account.

Shape as gonka-ai/gonka declares it (x/streamvesting: ``MsgBatchTransferWithVesting{sender, outputs:
[BatchVestingOutput{recipient, amount: Coins}], vesting_epochs}``; ValidateBasic refuses an invalid sender or
recipient address, empty outputs and zero amounts; the message server only accepts the gov authority as sender
and aggregates duplicate recipients). Amounts are ``ngonka`` integers written as decimal strings (cosmos Coins).
Only ``restitution_amount`` is paid: hosts whose outcome could not be decided (NULL) are named in the summary and
not paid."""
from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

from indexer.reports.restitution.collect import EpochCase
from indexer.reports.restitution.render import gonka
from indexer.reports.restitution.verdicts import level_label
from indexer.verify.signatures import SignatureError, bech32_decode
from indexer.verify.signatures import bech32_encode as bech32_address

MSG_TYPE = "/inference.streamvesting.MsgBatchTransferWithVesting"
PREFIX = "gonka"
DENOM = "ngonka"


class ProposalError(ValueError):
    """Why no proposal can be written (one line, naming the host and epoch): bad data."""


class NothingToPay(ProposalError):
    """No host-epoch of the range has an amount to restitute."""


def address_error(address: str, hrp: str = PREFIX) -> str | None:
    """Why ``address`` is not a valid ``hrp`` account address (None when it is), as the chain's ValidateBasic would
    refuse it: bech32 (one decoder for the project: indexer.verify.signatures) of a 20- or 32-byte account."""
    if not isinstance(address, str) or address.lower() != address or not address.startswith(hrp + "1"):
        return f"not a lowercase {hrp}1… address"
    try:
        _, payload = bech32_decode(address)
    except SignatureError as exc:
        if str(exc).endswith("bad checksum"):
            return "bad bech32 checksum"
        if str(exc).endswith("non-zero padding"):
            return "payload is not a 20- or 32-byte account address"
        return "not bech32 (characters outside the bech32 alphabet, or too short)"
    if len(payload) not in (20, 32):
        return "payload is not a 20- or 32-byte account address"
    return None


# the gov module account (cosmos address.Module("gov") = sha256("gov")[:20]); on mainnet
# gonka10d07y265gmmuvt4z0w9aw880jnsr700j2h5m33, the sender of the restitution proposals passed so far
GOV_AUTHORITY = bech32_address(PREFIX, hashlib.sha256(b"gov").digest()[:20])


def build(cases: list[EpochCase], deposit: str, vesting_epochs: int = 150) -> dict[str, Any]:
    """The proposal paying every host-epoch's ``restitution_amount`` (> 0), one output per recipient (amounts of
    several epochs summed); raises ProposalError when there is nothing to pay or a recipient address is invalid."""
    paid: dict[str, int] = {}
    lines: list[str] = []
    undecided = 0
    for case in cases:
        undecided += len(case.unknown)
        for r in case.candidates:
            amount = r["restitution_amount"]
            if not amount:
                continue
            why = address_error(r["participant"])
            if why:
                raise ProposalError(f"epoch {case.epoch}: recipient {r['participant']!r}: {why}; no proposal written")
            paid[r["participant"]] = paid.get(r["participant"], 0) + int(Decimal(amount))
            level = r.get("evidence_level")
            verified = f"evidence level {level_label(level)}; " if level else ""
            lines.append(f"epoch {case.epoch} {r['participant']}: {r['flipped_test']} outcome flips without the "
                         f"disputable penalties; {gonka(amount)} GONKA ({int(amount)} ngonka); {verified}evidence in "
                         f"restitution-{case.epoch}.md")
    if not paid:
        raise NothingToPay("no amount to restitute in the epochs reported; no proposal written")
    epochs = [c.epoch for c in cases]
    span = f"{min(epochs)}" if min(epochs) == max(epochs) else f"{min(epochs)}-{max(epochs)}"
    total = sum(paid.values())
    summary = "\n".join([f"Restitution of epoch rewards lost to disputable penalties, epochs {span}: "
                         f"{len(paid)} recipient(s), {gonka(total)} GONKA ({total} ngonka) in total.", *lines]
                        + ([f"{undecided} host-epoch(s) could not be evaluated and are not paid here (see the "
                            "reports' \"Hosts that could not be evaluated\")."] if undecided else []))
    return {
        "messages": [{
            "@type": MSG_TYPE,
            "sender": GOV_AUTHORITY,
            "outputs": [{"recipient": who, "amount": [{"denom": DENOM, "amount": str(n)}]}
                        for who, n in sorted(paid.items())],
            "vesting_epochs": str(vesting_epochs),
        }],
        "metadata": "",
        "deposit": deposit,
        "title": f"Restitution for disputable penalties, epochs {span}",
        "summary": summary,
        "expedited": False,
    }

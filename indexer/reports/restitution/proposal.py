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

MSG_TYPE = "/inference.streamvesting.MsgBatchTransferWithVesting"
PREFIX = "gonka"
DENOM = "ngonka"
_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GEN = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)


class ProposalError(ValueError):
    """Why no proposal can be written (one line, naming the host and epoch): bad data."""


class NothingToPay(ProposalError):
    """No host-epoch of the range has an amount to restitute."""


def _polymod(values: list[int]) -> int:
    chk = 1
    for v in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ v
        for i, g in enumerate(_GEN):
            chk ^= g if (top >> i) & 1 else 0
    return chk


def _expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def _regroup(data: list[int], from_bits: int, to_bits: int, pad: bool) -> list[int] | None:
    acc = bits = 0
    out = []
    for value in data:
        acc = (acc << from_bits) | value
        bits += from_bits
        while bits >= to_bits:
            bits -= to_bits
            out.append((acc >> bits) & ((1 << to_bits) - 1))
    if pad and bits:
        out.append((acc << (to_bits - bits)) & ((1 << to_bits) - 1))
    elif not pad and (bits >= from_bits or (acc << (to_bits - bits)) & ((1 << to_bits) - 1)):
        return None
    return out


def bech32_address(hrp: str, payload: bytes) -> str:
    """BIP-173 bech32 of ``payload`` (cosmos account addresses)."""
    data = _regroup(list(payload), 8, 5, True) or []
    check = _polymod(_expand(hrp) + data + [0] * 6) ^ 1
    return hrp + "1" + "".join(_CHARSET[d] for d in data + [(check >> 5 * (5 - i)) & 31 for i in range(6)])


def address_error(address: str, hrp: str = PREFIX) -> str | None:
    """Why ``address`` is not a valid ``hrp`` account address (None when it is)."""
    if not isinstance(address, str) or address.lower() != address or not address.startswith(hrp + "1"):
        return f"not a lowercase {hrp}1… address"
    data = address[len(hrp) + 1:]
    if len(data) < 7 or any(c not in _CHARSET for c in data):
        return "not bech32 (characters outside the bech32 alphabet, or too short)"
    values = [_CHARSET.index(c) for c in data]
    if _polymod(_expand(hrp) + values) != 1:
        return "bad bech32 checksum"
    payload = _regroup(values[:-6], 5, 8, False)
    if payload is None or len(payload) not in (20, 32):
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
            lines.append(f"epoch {case.epoch} {r['participant']}: {r['flipped_test']} outcome flips without the "
                         f"disputable penalties; {gonka(amount)} GONKA ({int(amount)} ngonka); evidence in "
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

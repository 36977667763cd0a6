"""Asking an escrow group's members for stored response payloads: the one place both the escrow fetch
(:mod:`indexer.poller.fetch`, the 0/0 Finishes of a new run of diffs) and the re-asking of awaited payloads
(:mod:`indexer.poller.awaited`) go through.

Any member of the group may keep a payload, and a member that does not serve one says nothing about the others: a
member that has not stored it yet answers 404, one that does not count the operator in the group yet 403, one whose
route is retired 410. So every payload a member did not serve, whatever its failure, is asked of the next member,
each member at most once per payload per call; each member's requests are pipelined on one connection
(:meth:`indexer.sources.gonka.host.DevshardHost.payloads`). A body of the wrong shape is reported (a format, not an
availability, problem) and the payload asked of the next member too, like one a member answered without a payload.

One answer is not about the member: a request this indexer could not sign (no operator key, or the operator not in
the escrow's group) refused for want of it (401, or 410 from a host that serves payloads only to attached members)
is refused by every member running the same code, in every cycle. Such a payload is ``refused``: not asked of the
other members, and not awaited (it stays unknown, as the interface says of payloads without operator mode).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from indexer.sources.gonka import FetchError, Gonka
from indexer.sources.gonka.host import PayloadShapeError

FailureReport = Callable[[str, str, str, bool], None]  # (source, url, error, transient)
UNSIGNED_REFUSALS = frozenset({401, 410})  # what a host answers a request it needs signed (or attached) for


@dataclass
class Asked:
    """What the members answered: ``found`` inference id → payload text, and for the ids no member served, the
    last member's failure (``errors``; a member that answered with no payload stored counts as one)."""
    found: dict[int, str] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    refused: set[int] = field(default_factory=set)  # unsigned requests refused for want of a signature

    def missing(self, inference_ids: Iterable[int]) -> list[int]:
        return [iid for iid in inference_ids if iid not in self.found]


def ask_members(g: Gonka, members: Sequence[str], version: str, escrow_id: str, inference_ids: Sequence[int],
                epoch: int, *, validator: str, report: FailureReport,
                group: Sequence[str] | None = None) -> Asked:
    """The stored payloads of ``inference_ids``, asked of ``members`` in order (each at most once per id), each
    member only for the ids no member before it served. ``group``: the escrow's whole group (who may sign for it;
    default ``members``)."""
    out = Asked()
    todo = list(dict.fromkeys(inference_ids))
    for address in dict.fromkeys(members):
        if not todo:
            break
        try:
            host = g.host(address)
        except FetchError as exc:
            for iid in todo:
                out.errors[iid] = f"host:{address}: {exc}"
            continue
        if host is None:
            for iid in todo:
                out.errors[iid] = f"host:{address}: the participant has no inference_url"
            continue
        everyone = list(group if group is not None else members)
        answers = host.payloads(version, escrow_id, todo, validator=validator, epoch=epoch, members=everyone)
        unsigned = host.operator is None or not host.operator.signs_for(everyone)
        left = []
        for iid, answer in zip(todo, answers):
            if isinstance(answer, FetchError):
                if isinstance(answer, PayloadShapeError):  # said once per member and payload
                    report(f"host:{address}", answer.url, str(answer), False)
                out.errors[iid] = f"host:{address}: {answer}"
                if unsigned and answer.status in UNSIGNED_REFUSALS and not answer.transient:
                    out.refused.add(iid)
                else:
                    left.append(iid)
            elif answer is None:
                out.errors[iid] = f"host:{address}: the host answered with no response payload stored"
                left.append(iid)
            else:
                out.found[iid] = answer
                out.errors.pop(iid, None)
        todo = left
    return out

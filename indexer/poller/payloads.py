"""Asking an escrow group's members for stored response payloads: the one place both the escrow fetch
(:mod:`indexer.poller.fetch`, the 0/0 Finishes of a new run of diffs) and the re-asking of awaited payloads
(:mod:`indexer.poller.awaited`) go through.

Any member of the group may keep a payload, and a member that does not serve one says nothing about the others: a
member that has not stored it yet answers 404, one that does not count the operator in the group yet 403, one whose
route is retired 410. So every payload a member did not serve, whatever its failure, is asked of the next member,
each member at most once per payload per call; each member's requests are pipelined on one connection
(:meth:`indexer.sources.gonka.host.DevshardHost.payloads`). A body of the wrong shape is reported (a format, not an
availability, problem) and the payload asked of the next member too, like one a member answered without a payload.

Every member is untrusted: a payload is taken only when its sha256 is the Finish's ``response_hash``, the check a
validator makes (:mod:`indexer.wire.payloads`). A member that serves other bytes is reported (``host:<address>``,
naming the escrow and inference) and the payload asked of the next member. A Finish without a response hash
vouches for no payload: it is not asked at all, said once (``payload:<escrow>/<inference>``), and stays unknown.

A request this indexer could not sign (no operator key, or the operator not in the escrow's group) may be refused
for want of it (401, or 410 from a host that serves payloads only to attached members), but a group of mixed host
versions has members that still serve it unsigned: the next member is asked all the same. Only a payload that
every member refused so is ``refused``: not awaited (it stays unknown, as the interface says of payloads without
operator mode), since every later cycle would get the same answers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from indexer.sources.gonka import FetchError, Gonka
from indexer.sources.gonka.host import PayloadShapeError
from indexer.wire.payloads import checkable, mismatch

FailureReport = Callable[[str, str, str, bool], None]  # (source, url, error, transient)
UNSIGNED_REFUSALS = frozenset({401, 410})  # what a host answers a request it needs signed (or attached) for


@dataclass
class Asked:
    """What the members answered: ``found`` inference id → payload text (its hash checked), and for the ids no
    member served, the last member's failure (``errors``; a member that answered with no payload stored, or with a
    payload of another hash, counts as one)."""
    found: dict[int, str] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    refused: set[int] = field(default_factory=set)       # every member refused the unsigned request
    unverifiable: set[int] = field(default_factory=set)  # the Finish has no response hash: never asked

    def add(self, other: "Asked") -> None:
        self.found.update(other.found)
        self.errors.update(other.errors)
        self.refused |= other.refused
        self.unverifiable |= other.unverifiable

    def settled(self, inference_id: int) -> bool:
        """Whether asking again later is pointless: served, refused by every member, or not checkable."""
        return inference_id in self.found or inference_id in self.refused or inference_id in self.unverifiable


def ask_members(g: Gonka, members: Sequence[str], version: str, escrow_id: str, wanted: Mapping[int, str | None],
                epoch: int, *, validator: str, report: FailureReport,
                group: Sequence[str] | None = None) -> Asked:
    """The stored payloads of the inferences of ``wanted`` (inference id → its Finish's ``response_hash``, hex),
    asked of ``members`` in order (each at most once per id), each member only for the ids no member before it
    served. ``group``: the escrow's whole group (who may sign for it; default ``members``)."""
    out = Asked()
    todo = []
    for iid, expected in wanted.items():
        if checkable(expected):
            todo.append(iid)
        else:
            out.unverifiable.add(iid)
            out.errors[iid] = "the Finish carries no response_hash: its payload cannot be checked and stays unknown"
            report(f"payload:{escrow_id}/{iid}", "", out.errors[iid], False)
    everyone = list(group if group is not None else members)
    refusals: dict[int, int] = {}  # id → members that refused it for want of a signature
    asked = 0
    for address in dict.fromkeys(members):
        if not todo:
            break
        asked += 1
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
        answers = host.payloads(version, escrow_id, todo, validator=validator, epoch=epoch, members=everyone)
        unsigned = host.operator is None or not host.operator.signs_for(everyone)
        left = []
        for iid, answer in zip(todo, answers):
            left.append(iid)
            if isinstance(answer, FetchError):
                if isinstance(answer, PayloadShapeError):  # said once per member and payload
                    report(f"host:{address}", answer.url, str(answer), False)
                out.errors[iid] = f"host:{address}: {answer}"
                if unsigned and answer.status in UNSIGNED_REFUSALS and not answer.transient:
                    refusals[iid] = refusals.get(iid, 0) + 1
            elif answer is None:
                out.errors[iid] = f"host:{address}: the host answered with no response payload stored"
            elif (wrong := mismatch(answer, wanted[iid])) is not None:
                said = f"escrow {escrow_id} inference {iid}: served payload not taken: {wrong}"
                report(f"host:{address}", host.payload_url(version, escrow_id, iid), said, False)
                out.errors[iid] = f"host:{address}: {said}"
            else:
                out.found[iid] = answer
                out.errors.pop(iid, None)
                left.pop()
        todo = left
    out.refused = {iid for iid in todo if asked and refusals.get(iid) == asked}
    return out

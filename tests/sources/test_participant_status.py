"""Each participant's status (the inference module's ParticipantStatus) is captured as the chain gives it, as of the
epoch's end height: a name or number the indexer does not know is kept as text, a height the nodes have pruned
leaves it unknown (never today's value), and a failed read is a ``status`` failure naming the participant."""
from __future__ import annotations

import httpx
import pytest

from indexer.sources.gonka import Fetcher, RetryPolicy
from indexer.sources.gonka.chain import PREFIX, ChainRest
from indexer.sources.gonka.snapshots import capture_epoch
from indexer.wire.chain_records import participant_status
from indexer.wire.normalize import NormalizeError
from tests.sources.test_snapshots_capture import END_267, KNOWN, LIVE, _node, served

OTHER = "gonka12pcu9mcrpa4w4sjd9y3dsksnvu495ss6f9r4ra"
PRUNED = "gonka14tqh62mangwzrma2lgg2dm375rcjzn2ydy8ttm"
NUMBERED = "gonka168rtjfkszuhcggg4dfyse4yh7xn9zwfglnkns2"


@pytest.mark.parametrize("status, want", [("ACTIVE", "ACTIVE"), ("INACTIVE", "INACTIVE"), (2, "INACTIVE"),
                                          ("3", "INVALID"), (4, "RAMPING"), (0, "UNSPECIFIED"),
                                          ("UNCONFIRMED", "UNCONFIRMED"), (9, "9"), (None, None), ("", None)])
def test_the_status_is_kept_as_the_chain_names_it(status, want):
    assert participant_status({"participant": {"address": "g1", "status": status}}, "g1") == want


@pytest.mark.parametrize("answer, message", [
    ({"participant": {"address": "g2", "status": "ACTIVE"}}, "answered for g2"),
    ({"participant": {"status": True}}, "not an enum name or number"),
    ({"participant": {"status": "X" * 65}}, "65 characters, more than the 64 allowed"),
])
def test_a_status_answer_that_cannot_be_taken_says_why(answer, message):
    with pytest.raises(NormalizeError, match=message):
        participant_status(answer, "g1")


def test_an_ended_epoch_captures_each_participants_status_as_of_its_end():
    base = _node([])
    reads = []

    def handler(req: httpx.Request) -> httpx.Response:
        path = req.url.path.removeprefix(PREFIX)
        height = req.headers.get("x-cosmos-block-height")
        if path.startswith("/participant/"):
            addr = path.split("/")[2]
            reads.append((addr, height))
            if addr == OTHER:
                return httpx.Response(500, json={"code": 13, "message": "internal", "details": []})
            if addr == PRUNED:
                return httpx.Response(500, json={"code": 2, "details": [], "message": (
                    f"failed to load state at height {height}; version does not exist (latest height: {LIVE})")})
            status = 2 if addr == NUMBERED else "INACTIVE" if addr == KNOWN else "ACTIVE"
            return served(req, httpx.Response(200, json={"participant": {"address": addr, "status": status}}))
        return base(req)

    fetcher = Fetcher("http://node", policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                      client=httpx.Client(transport=httpx.MockTransport(handler)))
    cap = capture_epoch(ChainRest(fetcher), 267, ended=True)
    people = {r["participant"]: r for r in cap.records if r["kind"] == "participant_epoch"}
    assert (people[KNOWN]["status"], people[KNOWN]["status_height"]) == ("INACTIVE", END_267)
    assert people[NUMBERED]["status"] == "INACTIVE"
    assert "status" not in people[PRUNED] and "status" not in people[OTHER]  # unknown, not ACTIVE
    assert {h for a, h in reads if a != PRUNED} == {str(END_267)}  # never a live read
    failed = [f for f in cap.failures if f.what == "status"]
    assert [(f.participant, f.source) for f in failed] == [(OTHER, f"snapshot:267:status:{OTHER}")]
    assert "HTTP 500" in failed[0].error and failed[0].url.endswith(f"/participant/{OTHER}")
    assert f"snapshot:267:status:{KNOWN}" in cap.succeeded and f"snapshot:267:status:{PRUNED}" in cap.succeeded

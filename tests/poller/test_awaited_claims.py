"""The awaited-payload job on its own (indexer.poller.awaited, indexer.poller.payloads): claims, their expiry, the
failure paths of a batch, and how the members of a group are asked."""
from __future__ import annotations

import json
import logging

import psycopg
import pytest

from indexer.poller.awaited import AwaitedPayloads, AwaitPolicy
from indexer.poller.payloads import ask_members
from indexer.poller.store import Store
from indexer.sources.gonka import FetchError
from indexer.sources.gonka.host import PayloadShapeError
from indexer.wire.payloads import response_hash_of as h


def _rows(conn, *keys: tuple[str, int]) -> None:
    for escrow_id, iid in keys:
        conn.execute("INSERT INTO net.awaited_payload (escrow_id, inference_id, epoch_index, protocol_version, record, "
                     "last_attempt_at, next_attempt_at) VALUES (%s, %s, 3, 'v5', %s, now() - interval '1 hour', "
                     "now() - interval '1 minute')",
                     (escrow_id, iid, '{"kind":"finish","escrow_id":"%s","inference_id":%d,"response_hash":"%s"}'
                      % (escrow_id, iid, "ab" * 32)))


def _job(conn, holder: str, **policy) -> AwaitedPayloads:
    since = conn.execute("SELECT now()").fetchone()[0]
    return AwaitedPayloads(None, Store(conn, archive=False), holder=holder, since=since, validator="gonka1v",
                           policy=AwaitPolicy(backoff=0.0, **policy))


def test_a_claim_is_held_until_it_expires_and_a_killed_poller_s_rows_are_then_taken(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        _rows(conn, ("7", 1), ("7", 2), ("8", 1))
        first = _job(conn, "poller-a", batch=2).claim()
        assert [(c.escrow_id, c.inference_id) for c in first] == [("7", 1), ("7", 2)]  # oldest due first, bounded
        second = _job(conn, "poller-b").claim()
        assert [(c.escrow_id, c.inference_id) for c in second] == [("8", 1)]  # never one poller-a holds
        assert _job(conn, "poller-c").claim() == []
        # poller-a was killed: its claims expire (claimed_until passes) and another poller takes the rows
        conn.execute("UPDATE net.awaited_payload SET claimed_until = now() - interval '1 s' "
                     "WHERE claimed_by = 'poller-a'")
        taken = _job(conn, "poller-c").claim()
        assert sorted((c.escrow_id, c.inference_id) for c in taken) == [("7", 1), ("7", 2)]


def test_a_row_of_an_escrow_whose_group_is_not_stored_counts_an_attempt_with_why(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        _rows(conn, ("9", 4))
        job = _job(conn, "poller-a", attempts=3)
        job.run()
        row = conn.execute("SELECT attempts, last_error, given_up_at IS NULL, claimed_by FROM net.awaited_payload"
                           ).fetchone()
    assert job.asked == 1 and job.obtained == 0 and job.given_up == 0
    assert row == (2, "the escrow's group is not stored", True, None)


def test_a_batch_that_fails_counts_the_attempt_and_one_whose_connection_broke_leaves_the_claims_to_expire(
        db_url, monkeypatch, caplog):
    with psycopg.connect(db_url, autocommit=True) as conn:
        _rows(conn, ("7", 1))
        monkeypatch.setattr(AwaitedPayloads, "ask", lambda self, claimed: ({}, {}))

        def fail(self, claimed, found, errors):
            raise RuntimeError("the commit failed")

        monkeypatch.setattr(AwaitedPayloads, "commit", fail)
        with pytest.raises(RuntimeError, match="the commit failed"):
            _job(conn, "poller-a", attempts=2).run()
        # the attempt counted (a failure that repeats ends in a give-up), with the error, and the claim given back
        assert conn.execute("SELECT attempts, claimed_by, given_up_at IS NOT NULL, last_error "
                            "FROM net.awaited_payload").fetchone() == (
            2, None, True, "awaited payloads: the batch failed: RuntimeError: the commit failed")
        assert conn.execute("SELECT count(*) FROM net.failure WHERE source = 'payload:7/1'").fetchone()[0] == 1
        conn.execute("UPDATE net.awaited_payload SET attempts = 1, given_up_at = NULL, "
                     "last_attempt_at = now() - interval '1 hour', next_attempt_at = now() - interval '1 minute'")

    side = psycopg.connect(db_url, autocommit=True)

    def drop(self, claimed, found, errors):
        side.close()  # the database connection is gone: the attempt cannot be counted nor the claims given back
        raise RuntimeError("connection lost")

    monkeypatch.setattr(AwaitedPayloads, "commit", drop)
    caplog.set_level(logging.WARNING, "indexer.poller.awaited")
    with pytest.raises(RuntimeError, match="connection lost"):
        _job(side, "poller-b").run()
    said = [r.getMessage() for r in caplog.records]
    assert any("the failed attempt not counted" in m for m in said)
    assert any("claims not given back (they expire)" in m for m in said)
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT attempts, claimed_by FROM net.awaited_payload").fetchone() == (1, "poller-b")


def test_an_interrupted_batch_gives_its_claims_back_without_counting_an_attempt(db_url, monkeypatch):
    with psycopg.connect(db_url, autocommit=True) as conn:
        _rows(conn, ("7", 1))
        monkeypatch.setattr(AwaitedPayloads, "ask", lambda self, claimed: ({}, {}))

        def interrupted(self, claimed, found, errors):
            raise KeyboardInterrupt

        monkeypatch.setattr(AwaitedPayloads, "commit", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _job(conn, "poller-a").run()
        assert conn.execute("SELECT attempts, claimed_by FROM net.awaited_payload").fetchone() == (1, None)


def test_the_policy_is_checked():
    for bad in ({"attempts": 1}, {"batch": 0}, {"backoff": -1.0}, {"claim_seconds": 0.0}):
        with pytest.raises(ValueError, match="payload retry policy out of range"):
            AwaitPolicy(**bad)


class _Host:
    operator = None  # no operator mode: requests unsigned

    def __init__(self, answers):
        self.answers, self.asked = answers, []

    def payloads(self, version, escrow_id, ids, *, validator, epoch, members):
        self.asked.append(list(ids))
        return [self.answers.get(i) for i in ids]


class _Gonka:
    """The hosts of a group, each answering a fixed payload or failure per inference (no network)."""

    def __init__(self, hosts):
        self.hosts = hosts

    def host(self, address):
        found = self.hosts[address]
        if isinstance(found, FetchError):
            raise found
        return found


def _report():
    said: list[tuple] = []
    return said, lambda *r: said.append(r)


def test_every_failure_moves_the_payload_to_the_next_member_once():
    shape = PayloadShapeError("http://c/payloads?inference_id=3", "payload response: not an object", status=200,
                              transient=False)
    c = _Host({1: FetchError("http://c", "HTTP 404", status=404, transient=False), 2: None, 3: shape})
    d = _Host({1: "one", 2: "two"})
    g = _Gonka({"a": FetchError("participant:a", "refused inference_url", transient=False), "b": None,
                "c": c, "d": d})
    reported, report = _report()
    asked = ask_members(g, ["a", "b", "c", "d", "c"], "v5", "7", {1: h("one"), 2: h("two"), 3: h("three")}, 3,
                        validator="gonka1v", report=report)
    assert asked.found == {1: "one", 2: "two"}
    assert c.asked == [[1, 2, 3]] and d.asked == [[1, 2, 3]]  # c once, though listed twice
    assert asked.errors == {3: "host:d: the host answered with no response payload stored"}
    assert not asked.settled(3) and asked.settled(1)
    assert reported == [("host:c", shape.url, str(shape), False)]  # a wrong shape is said


class _Operator:
    def __init__(self, member):
        self.member = member

    def signs_for(self, members):
        return members is not None and self.member in members


def _refusing(status, *ids):
    return _Host({i: FetchError(f"http://{status}", f"HTTP {status}", status=status, transient=False) for i in ids})


def test_in_a_group_of_mixed_host_versions_an_unsigned_refusal_moves_the_payload_to_the_next_member():
    # a new host (HTTP route retired, no operator key: 410) or one wanting a signature (401) first, in every
    # cycle's order; an older member behind it still serves the payload unsigned
    for status in (401, 410):
        new, old = _refusing(status, 1, 2), _Host({1: "one"})
        asked = ask_members(_Gonka({"new": new, "old": old}), ["new", "old"], "v5", "7", {1: h("one"), 2: h("two")},
                            3, validator="gonka1v", report=lambda *r: None)
        assert asked.found == {1: "one"} and old.asked == [[1, 2]]
        # 2: the old member has not stored it yet, so it is not refused by every member: asked again later
        assert asked.refused == set() and not asked.settled(2)


def test_a_payload_every_member_refused_unsigned_is_refused_and_a_signed_refusal_is_the_member_s_own():
    a, b = _refusing(401, 1), _refusing(410, 1)
    asked = ask_members(_Gonka({"a": a, "b": b}), ["a", "b"], "v5", "7", {1: h("one")}, 3, validator="gonka1v",
                        report=lambda *r: None)
    assert asked.refused == {1} and asked.settled(1) and a.asked == b.asked == [[1]]
    # a member that could not be asked may serve it later: not refused by every member
    asked = ask_members(_Gonka({"a": _refusing(401, 1), "b": None}), ["a", "b"], "v5", "7", {1: h("one")}, 3,
                        validator="gonka1v", report=lambda *r: None)
    assert asked.refused == set()
    signed = _refusing(401, 1)
    signed.operator = _Operator("c")  # the operator is in the group: a 401 is this member's, not every member's
    asked = ask_members(_Gonka({"c": signed, "d": _refusing(401, 1)}), ["c", "d"], "v5", "7", {1: h("one")}, 3,
                        validator="gonka1v", report=lambda *r: None)
    assert asked.refused == set()


def test_a_payload_that_does_not_hash_to_the_finish_s_response_hash_is_not_taken():
    made_up = json.dumps({"events": ["data: " + json.dumps({"error": {"code": 400, "message": "maximum context "
                                                                       "length is 4096 tokens"}}), "data: [DONE]"]})
    liar, honest = _Host({1: made_up, 2: made_up}), _Host({1: "the stored body"})
    liar.payload_url = lambda version, escrow_id, iid: f"http://liar/payloads?inference_id={iid}"
    reported, report = _report()
    wanted = {1: h("the stored body"), 2: h("another stored body").upper()}  # hex in either case
    asked = ask_members(_Gonka({"liar": liar, "honest": honest}), ["liar", "honest"], "v5", "7", wanted, 3,
                        validator="gonka1v", report=report)
    assert asked.found == {1: "the stored body"} and honest.asked == [[1, 2]]  # the next member asked
    assert asked.errors[2] == "host:honest: the host answered with no response payload stored"
    assert not asked.settled(2)  # awaited: an honest member may serve it later
    said = {(source, url): error for source, url, error, _ in reported}
    assert set(said) == {("host:liar", "http://liar/payloads?inference_id=1"),
                         ("host:liar", "http://liar/payloads?inference_id=2")}
    assert said[("host:liar", "http://liar/payloads?inference_id=1")] == (
        f"escrow 7 inference 1: served payload not taken: sha256 of the payload is {h(made_up)}, "
        f"not the Finish's response_hash {h('the stored body')}")
    asked = ask_members(_Gonka({"liar": liar}), ["liar"], "v5", "7", {2: wanted[2]}, 3, validator="gonka1v",
                        report=lambda *r: None)
    assert asked.found == {} and "served payload not taken" in asked.errors[2]


def test_a_finish_without_a_response_hash_is_not_asked_and_said_once():
    honest = _Host({1: "the stored body"})
    reported, report = _report()
    asked = ask_members(_Gonka({"a": honest}), ["a"], "v5", "7", {1: "", 2: None}, 3, validator="gonka1v",
                        report=report)
    assert honest.asked == [] and asked.found == {} and asked.unverifiable == {1, 2}
    assert asked.settled(1) and asked.settled(2)  # never awaited: no member could ever be believed
    assert [(s, t) for s, _, _, t in reported] == [("payload:7/1", False), ("payload:7/2", False)]
    assert all("no response_hash" in e for _, _, e, _ in reported)


def test_members_that_cannot_be_asked_say_why():
    g = _Gonka({"a": FetchError("participant:a", "refused inference_url", transient=False), "b": None})
    asked = ask_members(g, ["a", "b"], "v5", "7", {1: h("one")}, 3, validator="gonka1v", report=lambda *r: None)
    assert asked.found == {} and asked.errors == {1: "host:b: the participant has no inference_url"}
    asked = ask_members(g, ["a"], "v5", "7", {1: h("one")}, 3, validator="gonka1v", report=lambda *r: None)
    assert asked.errors[1].startswith("host:a: refused inference_url")

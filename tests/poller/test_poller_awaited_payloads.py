"""Payloads the poller could not get are asked again: of the group's next members within a cycle whatever the
failure, and in later cycles (net.awaited_payload) until served or given up, also for escrows that are final."""
from __future__ import annotations

import threading

import psycopg
import pytest

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.poller import poll_once
from indexer.poller.awaited import AwaitedPayloads, AwaitPolicy
from indexer.refusals.vllm import parse_response_payload
from indexer.sources.gonka import RetryPolicy
from tests.support.rules_kit import stored as stored_envelope

CONTEXT_LENGTH_LIE = ("This model's maximum context length is 4096 tokens. However, you requested 4097 tokens "
                      "(4000 in the messages, 97 in the completion).")

POLICY = RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=4)
NOW = AwaitPolicy(backoff=0.0)  # due again in the very next cycle


def _scenario() -> Scenario:
    return Scenario(ScenarioConfig(seed=11, epochs=2, escrows_per_epoch=4, inferences_per_escrow=30))


def _zero_zero(scn: Scenario) -> dict[tuple[str, int], str]:
    """(escrow, inference) → stored payload of every 0/0 Finish the scenario has a payload for."""
    return {(eid, r["inference_id"]): r["response_payload"] for eid in scn.escrows for r in scn.tx_records(eid)
            if r["kind"] == "finish" and r.get("response_payload") is not None
            and r["input_tokens"] == 0 and r["output_tokens"] == 0}


def _poll(db_url, net, **kw):
    return poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=POLICY, private_hosts=True,
                     **{"awaiting": NOW, **kw})


def _a_cycle_no_member_serves(db_url, net, scn: Scenario) -> None:
    """Every epoch reached and polled once while every member answers 404 to payload requests."""
    net.advance_to_last_epoch()
    net.app.options.payload_statuses = {h.address: 404 for h in scn.hosts}
    _poll(db_url, net)

def _stored(db_url) -> dict[tuple[str, int], str | None]:
    with psycopg.connect(db_url) as c:
        return {(e, int(i)): p for e, i, p in c.execute(
            "SELECT escrow_id, inference_id, response_payload FROM rec.finish_tx "
            "WHERE input_tokens = 0 AND output_tokens = 0")}


def _awaited(db_url) -> dict[tuple[str, int], tuple]:
    with psycopg.connect(db_url) as c:
        return {(e, int(i)): (state, attempts, err) for e, i, state, attempts, err in c.execute(
            "SELECT escrow_id, inference_id, state, attempts, last_error FROM api.awaited_payloads")}


def _failures(db_url, source: str) -> list[str]:
    with psycopg.connect(db_url) as c:
        return [e for (e,) in c.execute("SELECT error FROM net.failure WHERE source = %s", (source,))]


def _named(error: str) -> tuple[str, int]:
    """(escrow, inference) a failure's error names ("… escrow E inference I: …")."""
    words = error.split()
    return words[words.index("escrow") + 1], int(words[words.index("inference") + 1].rstrip(":"))


def _kinds(db_url) -> dict[tuple[str, int], str]:
    with psycopg.connect(db_url) as c:
        return {(e, int(i)): k for e, i, k in c.execute(
            "SELECT escrow_id, inference_id, refusal_kind FROM api.context_refusals")}


def test_a_payload_refused_with_404_or_403_is_asked_of_the_next_member_in_the_same_cycle(db_url):
    scn = _scenario()
    want = _zero_zero(scn)
    serving = max((h.address for h in scn.hosts),
                  key=lambda a: sum(a in scn.escrows[e].slots for e, _ in want))
    mine = {k: p for k, p in want.items() if serving in scn.escrows[k[0]].slots}
    assert mine
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        others = [h.address for h in scn.hosts if h.address != serving]
        net.app.options.payload_statuses = {a: (404, 403)[n % 2] for n, a in enumerate(others)}
        _poll(db_url, net)
        requests = dict(net.app.payload_requests)
    stored = _stored(db_url)
    assert {k: stored[k] for k in mine} == mine  # every one stored in this cycle, whatever the others answered
    assert not set(mine) & set(_awaited(db_url))
    # each member at most once per payload in the cycle, and the refusing members were asked before the server
    assert max(requests.values()) == 1
    refused = {(a, e, i) for (a, e, i) in requests if a != serving}
    assert {(e, int(i)) for _, e, i in refused} & set(mine)
    # the payloads no member of their group served are awaited, with the last member's answer
    rest = {k for k in want if k not in mine}
    awaited = _awaited(db_url)
    assert set(awaited) == rest
    assert all(state == "awaited" and attempts == 1 and ("404" in err or "403" in err)
               for state, attempts, err in awaited.values())


@pytest.mark.parametrize("status", [401, 410])
def test_an_unsigned_request_every_member_refused_for_want_of_a_signature_is_not_awaited(db_url, status):
    # without operator mode a host may refuse the request itself (401: unsigned; 410: served only to attached
    # members); asked of every member once, and refused by all, it is not awaited: every cycle would hear the same
    scn = _scenario()
    want = _zero_zero(scn)
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.payload_statuses = {h.address: status for h in scn.hosts}
        _poll(db_url, net)
        requests = dict(net.app.payload_requests)
    asked: dict[tuple[str, int], list[str]] = {}
    for (a, e, i), n in requests.items():
        asked.setdefault((e, int(i)), []).extend([a] * n)
    assert set(asked) == set(want)
    assert all(sorted(by) == sorted(set(scn.escrows[e].slots)) for (e, _), by in asked.items())  # each member once
    assert _awaited(db_url) == {}
    assert all(p is None for k, p in _stored(db_url).items() if k in want)


def test_in_a_group_of_mixed_host_versions_the_older_members_serve_what_a_new_host_refuses_unsigned(db_url):
    # new hosts retired the HTTP payload route (410 http_session_retired) and, without operator mode, cannot be
    # read over Connect RPC; the older members of the same groups still serve payloads unsigned
    scn = _scenario()
    want = _zero_zero(scn)
    new = tuple(h.address for n, h in enumerate(scn.hosts) if n % 2 == 0)
    mixed = {k for k in want if set(scn.escrows[k[0]].slots) - set(new)}
    assert mixed and any(set(scn.escrows[e].slots) & set(new) for e, _ in mixed)
    with DevnetServer(scn) as net:
        net.app.options.rpc_hosts = new
        net.advance_to_last_epoch()
        _poll(db_url, net)
    stored = _stored(db_url)
    assert {k: stored[k] for k in mixed} == {k: want[k] for k in mixed}
    assert set(_awaited(db_url)) == set()  # the rest (if any): every member refused, so not awaited either
    assert all(stored[k] is None for k in set(want) - mixed)


def test_a_member_serving_a_made_up_payload_is_caught_in_the_fetch_and_in_the_awaited_asking(db_url):
    # the honest members have not stored the payloads yet (404); one member (say the executor whose penalty is
    # disputed) serves a context-length refusal it made up: its bytes do not hash to the Finish's response_hash
    scn = _scenario()
    want = _zero_zero(scn)
    liar = scn.hosts[0].address
    lie = stored_envelope(CONTEXT_LENGTH_LIE)
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.payload_statuses = {h.address: 404 for h in scn.hosts if h.address != liar}
        net.app.options.payload_liars = {liar: lie}
        _poll(db_url, net)
        lied = {k for k in want if liar in scn.escrows[k[0]].slots}
        assert lied
        assert all(p is None for k, p in _stored(db_url).items() if k in want)  # nothing of the lie stored
        assert {_kinds(db_url)[k] for k in want} == {"unknown"}
        awaited = _awaited(db_url)
        assert set(awaited) == set(want)  # awaited: an honest member may serve them later
        said = _failures(db_url, f"host:{liar}")
        assert {(e, i) for e, i in lied} <= {_named(err) for err in said}
        assert all("served payload not taken: sha256 of the payload is" in err for err in said)

        # the awaited asking checks too: the liar alone answers, and is not believed
        net.app.options.payload_statuses = {}
        net.app.options.payload_liars = {h.address: lie for h in scn.hosts}
        summary = _poll(db_url, net)
        assert summary.payloads_asked == len(want) and summary.payloads_obtained == 0
        awaited = _awaited(db_url)
        assert all(a[1] == 2 and "served payload not taken" in a[2] for a in awaited.values())

        net.app.options.payload_liars = {}  # the honest members serve the stored bodies: those are taken
        summary = _poll(db_url, net)
    assert summary.payloads_obtained == len(want)
    stored = _stored(db_url)
    assert {k: stored[k] for k in want} == want and _awaited(db_url) == {}


def test_a_payload_served_only_in_a_later_cycle_upgrades_the_refusal_of_a_final_escrow(db_url):
    scn = _scenario()
    want = _zero_zero(scn)
    with DevnetServer(scn) as net:
        _a_cycle_no_member_serves(db_url, net, scn)
        with psycopg.connect(db_url) as c:
            final = {s.split(":", 1)[1] for (s,) in c.execute(
                "SELECT source FROM api.ingest_status WHERE source LIKE 'escrow-final:%%'")}
        later = {k for k in want if k[0] in final}
        assert later, "the scenario has 0/0 Finishes in escrows final after one cycle"
        assert set(_awaited(db_url)) == set(want)
        assert {_kinds(db_url)[k] for k in want} == {"unknown"}

        net.app.options.payload_statuses = {}
        summary = _poll(db_url, net)
    assert summary.payloads_asked == summary.payloads_obtained == len(want)
    assert summary.escrows == len(scn.escrows) - len(final)  # the final escrows' logs were not fetched again
    assert summary.replayed_escrows >= len({e for e, _ in want})
    stored = _stored(db_url)
    assert {k: stored[k] for k in want} == want
    assert _awaited(db_url) == {}
    kinds = _kinds(db_url)
    assert {k: kinds[k] for k in want} == {k: parse_response_payload(p).refusal_kind for k, p in want.items()}
    assert "unknown" not in {kinds[k] for k in want} and "context_length" in {kinds[k] for k in later}
    with psycopg.connect(db_url) as c:  # amended through the load path: the earlier version is in the history
        amended = c.execute("SELECT count(*) FROM rec.amendment WHERE kind = 'finish'").fetchone()[0]
    assert amended == len(want)


def test_a_payload_never_served_is_given_up_after_the_last_attempt_and_not_asked_again(db_url):
    scn = _scenario()
    want = _zero_zero(scn)
    policy = AwaitPolicy(attempts=3, backoff=0.0)
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.payload_statuses = {h.address: 404 for h in scn.hosts}
        outcomes = []
        for _ in range(4):
            before = sum(net.app.payload_requests.values())
            s = _poll(db_url, net, awaiting=policy)
            outcomes.append((s.payloads_asked, s.payloads_given_up, sum(net.app.payload_requests.values()) - before))
    n = len(want)
    assert [o[:2] for o in outcomes] == [(0, 0), (n, 0), (n, n), (0, 0)]
    assert outcomes[3][2] == 0  # given up: no request for them any more
    awaited = _awaited(db_url)
    assert set(awaited) == set(want)
    assert all(state == "given_up" and attempts == 3 and "404" in err for state, attempts, err in awaited.values())
    with psycopg.connect(db_url) as c:
        said = c.execute("SELECT source, error, transient FROM api.source_errors WHERE source_class = 'payload'"
                         ).fetchall()
        states = c.execute("SELECT state, count(*) FROM api.awaited_payloads GROUP BY 1").fetchall()
    assert states == [("given_up", n)]
    assert {s for s, _, _ in said} == {f"payload:{e}/{i}" for e, i in want}
    assert all(e.startswith("response payload given up after 3 attempts: host:") and not t for _, e, t in said)


def test_a_crash_between_fetching_and_committing_loses_no_awaited_payload(db_url, monkeypatch):
    scn = _scenario()
    want = _zero_zero(scn)
    with DevnetServer(scn) as net:
        _a_cycle_no_member_serves(db_url, net, scn)
        net.app.options.payload_statuses = {}
        real = AwaitedPayloads.commit

        def crash(self, claimed, found, errors):
            assert found  # fetched, then the process dies before the commit
            raise KeyboardInterrupt("killed between fetch and commit")

        monkeypatch.setattr(AwaitedPayloads, "commit", crash)
        with pytest.raises(KeyboardInterrupt):
            _poll(db_url, net)
        awaited = _awaited(db_url)
        assert set(awaited) == set(want) and all(a[1] == 1 for a in awaited.values())
        with psycopg.connect(db_url) as c:
            assert c.execute("SELECT count(*) FROM net.awaited_payload WHERE claimed_by IS NOT NULL").fetchone()[0] == 0
        monkeypatch.setattr(AwaitedPayloads, "commit", real)
        summary = _poll(db_url, net)
    assert summary.payloads_obtained == len(want)
    stored = _stored(db_url)
    assert {k: stored[k] for k in want} == want and _awaited(db_url) == {}


def test_two_pollers_never_ask_for_one_awaited_payload_at_once(db_url, monkeypatch):
    scn = _scenario()
    want = _zero_zero(scn)
    with DevnetServer(scn) as net:
        _a_cycle_no_member_serves(db_url, net, scn)
        net.app.options.payload_statuses = {}
        net.app.payload_requests.clear()
        both_claimed = threading.Barrier(2, timeout=60)
        claims: dict[str, set] = {}
        real = AwaitedPayloads.claim

        def claim(self):  # both pollers claim before either asks: the claims must not overlap
            rows = real(self)
            claims[self.holder] = {(c.escrow_id, c.inference_id) for c in rows}
            both_claimed.wait()
            return rows

        monkeypatch.setattr(AwaitedPayloads, "claim", claim)
        small = AwaitPolicy(backoff=0.0, batch=max(1, len(want) // 2))
        out, errors = {}, []

        def run(holder):
            try:
                out[holder] = _poll(db_url, net, awaiting=small, holder=holder)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the test thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(h,)) for h in ("poller-a", "poller-b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        requests = dict(net.app.payload_requests)
    a, b = claims["poller-a"], claims["poller-b"]
    assert a and b and not a & b and a | b <= set(want)
    assert out["poller-a"].payloads_obtained + out["poller-b"].payloads_obtained == len(a | b)
    assert max(requests.values()) == 1  # the first member serves each: asked once, by one poller


def test_a_failing_awaited_batch_counts_its_attempt_and_the_cycle_still_completes(db_url, monkeypatch):
    scn = _scenario()
    want = _zero_zero(scn)
    with DevnetServer(scn) as net:
        _a_cycle_no_member_serves(db_url, net, scn)
        with psycopg.connect(db_url) as c:
            before = c.execute("SELECT updated_at FROM net.cursor WHERE source = 'chain'").fetchone()[0]
        net.app.options.payload_statuses = {}
        real = AwaitedPayloads.commit

        def broken(self, claimed, found, errors):
            assert found  # served and checked; then storing them fails, the same way every cycle
            raise RuntimeError("the payloads could not be stored")

        monkeypatch.setattr(AwaitedPayloads, "commit", broken)
        summary = _poll(db_url, net)  # returns: the cycle is not failed by its awaited batch
        assert summary.payloads_asked == len(want) and summary.payloads_obtained == 0
        with psycopg.connect(db_url) as c:
            after, error = c.execute("SELECT updated_at, last_error FROM net.cursor WHERE source = 'chain'"
                                     ).fetchone()
            said = c.execute("SELECT error, transient FROM api.source_errors WHERE source = 'payloads'").fetchall()
        assert after > before and error is None  # the poll cursor moved on
        assert said == [("awaited payloads not asked this cycle: RuntimeError: the payloads could not be stored", True)]
        awaited = _awaited(db_url)
        assert set(awaited) == set(want)
        assert all(state == "awaited" and attempts == 2 and err == ("awaited payloads: the batch failed: "
                                                                    "RuntimeError: the payloads could not be stored")
                   for state, attempts, err in awaited.values())
        assert _claimed(db_url) == 0

        monkeypatch.setattr(AwaitedPayloads, "commit", real)
        summary = _poll(db_url, net)
    assert summary.payloads_obtained == len(want)
    stored = _stored(db_url)
    assert {k: stored[k] for k in want} == want and _awaited(db_url) == {}


def _claimed(db_url) -> int:
    with psycopg.connect(db_url) as c:
        return c.execute("SELECT count(*) FROM net.awaited_payload WHERE claimed_by IS NOT NULL").fetchone()[0]

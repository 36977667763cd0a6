"""A poll in operator mode over a network of old hosts (HTTP payload route) and new ones (410 http_session_retired,
payloads over Connect RPC): every member payload is filled whichever route its host speaks, and the route of each
new host is recorded once in api.source_errors instead of one generic failure per request."""
from __future__ import annotations

import psycopg

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.devnet.operators import write_operator_key
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from indexer.sources.gonka.signing import operator_from_env

POLICY = RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=8)


def _zero_zero(scn: Scenario, escrow_id: str) -> dict[int, str]:
    return {r["inference_id"]: r["response_payload"] for r in scn.tx_records(escrow_id)
            if r["kind"] == "finish" and r.get("response_payload") is not None
            and r["input_tokens"] == 0 and r["output_tokens"] == 0}


def test_poll_reads_old_and_new_hosts_and_records_each_new_hosts_route(db_url, tmp_path):
    scn = Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=4, inferences_per_escrow=30))
    hosts = [h.address for h in scn.hosts]
    new = tuple(hosts[::2])  # every other host is new: groups mix both kinds
    inside = {e.escrow_id: e for e in scn.escrows.values() if _zero_zero(scn, e.escrow_id)}
    operator = max(hosts, key=lambda a: sum(a in e.slots for e in inside.values()))
    mine = [eid for eid, e in inside.items() if operator in e.slots]
    assert mine and any(set(inside[eid].slots) & set(new) and set(inside[eid].slots) - set(new) for eid in mine)
    key = write_operator_key(tmp_path / "operator.key", scn.keys, operator)
    op = operator_from_env({"GONKA_OPERATOR_ADDRESS": operator, "GONKA_OPERATOR_KEY_FILE": str(key)})
    with DevnetServer(scn, payload_auth=True, rpc_hosts=new) as net:
        poll_once(db_url, net.chain_rest_url, net.rpc_url, operator=op, policy=POLICY, private_hosts=True)
        attached = net.app.peer_rpc.attached
    with psycopg.connect(db_url) as c:
        got = {(e, int(i)): p for e, i, p in c.execute(
            "SELECT escrow_id, inference_id, response_payload FROM rec.finish_tx WHERE response_payload IS NOT NULL")}
        routes = c.execute("SELECT source, error, transient FROM api.source_errors "
                           "WHERE error LIKE 'payload route:%%'").fetchall()
        generic_410 = c.execute("SELECT count(*) FROM api.source_errors WHERE error LIKE 'HTTP 410%%'").fetchone()[0]
        archived = [u for (u,) in c.execute("SELECT url FROM net.raw_response WHERE url LIKE '%%/rpc/%%'")]
    assert got == {(eid, i): p for eid in mine for i, p in _zero_zero(scn, eid).items()}
    assert attached >= 1 and routes  # some payloads came over Connect RPC
    assert {source for source, _, _ in routes} <= {f"host:{a}" for a in new}
    assert len({source for source, _, _ in routes}) == len(routes)  # once per host and cycle
    assert all(error == "payload route: Connect RPC (the HTTP payload route is retired (410 X-Devshard-Error: "
                        "http_session_retired))" and not transient for _, error, transient in routes)
    assert generic_410 == 0
    # payload answers are archived like the HTTP route's; Attach answers carry the session token and are not
    assert any(u.endswith("PayloadService/GetPayload") for u in archived)
    assert not any("PeerAuthService" in u for u in archived)


def test_a_member_refusing_the_attach_leaves_the_payloads_to_the_next_member(db_url, tmp_path):
    """Every member but the last refuses the operator's Attach: the refusal says nothing about the payloads, so
    the next member is asked and every 0/0 Finish is stored with its payload (not as one without)."""
    scn = Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=4, inferences_per_escrow=30))
    eid, esc = next((eid, e) for eid, e in scn.escrows.items() if _zero_zero(scn, eid)
                    and len(set(e.slots)) >= 3)
    members = list(dict.fromkeys(esc.slots))
    operator, serving = members[0], members[-1]
    key = write_operator_key(tmp_path / "operator.key", scn.keys, operator)
    op = operator_from_env({"GONKA_OPERATOR_ADDRESS": operator, "GONKA_OPERATOR_KEY_FILE": str(key)})
    hosts = tuple(h.address for h in scn.hosts)
    with DevnetServer(scn, payload_auth=True, rpc_hosts=hosts) as net:
        net.app.options.refusing_attach_hosts = tuple(h for h in hosts if h != serving)
        poll_once(db_url, net.chain_rest_url, net.rpc_url, operator=op, policy=POLICY, private_hosts=True)
    with psycopg.connect(db_url) as c:
        got = {int(i): p for i, p in c.execute(
            "SELECT inference_id, response_payload FROM rec.finish_tx WHERE escrow_id = %s "
            "AND input_tokens = 0 AND output_tokens = 0", (eid,))}
        refused = c.execute("SELECT count(*) FROM api.source_errors WHERE error LIKE '%%refused%%Attach%%' "
                            "OR error LIKE '%%Attach%%refused%%'").fetchone()[0]
    assert got == _zero_zero(scn, eid)
    assert refused >= 1  # the refusals are said

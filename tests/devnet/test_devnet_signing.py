"""The devnet's keys and signing: real addresses, refusals of a log the session rules would refuse, and the chain
answers around the settlement (grants, raw transactions, unknown hashes, versions whose rules are not ported)."""
from __future__ import annotations

import base64
import copy
import hashlib
from types import SimpleNamespace
from urllib.parse import quote

import httpx
import pytest

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.devnet import sealing
from indexer.devnet.keys import WARM_GRANT_TYPE, Keyring, host_address
from indexer.devnet.state import TIMED_OUT
from indexer.verify import signatures as sig

CHAIN = "/productscience/inference/inference"


@pytest.fixture(scope="module")
def scn() -> Scenario:
    return Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=1, inferences_per_escrow=12))


def test_addresses_are_the_bech32_addresses_of_the_keys(scn):
    keys = scn.keys
    for host in scn.hosts:
        assert host.address == host_address(11, host.name) == sig.address_of_pubkey(keys.public_key(host.address))
        warm = keys.warm_of(host.address)
        assert warm != host.address and keys.granter_of(warm) == host.address
        assert sig.bech32_decode(warm)[0] == "gonka"
    esc = next(iter(scn.escrows.values()))
    assert esc.creator == keys.user and sig.bech32_decode(esc.creator)[0] == "gonka"
    message = b"any bytes"
    assert sig.recover_address(message, keys.sign(esc.creator, message)) == esc.creator
    assert Keyring(11, ["hostA"]).host_address("hostA") == scn.hosts_by_name["hostA"].address  # the seed fixes them
    assert Keyring(12, ["hostA"]).host_address("hostA") != scn.hosts_by_name["hostA"].address
    with pytest.raises(KeyError):
        keys.secret_of("gonka1notadevnetkey")


def test_a_log_the_rules_refuse_stops_generation_naming_the_escrow_and_rule(scn):
    esc = next(iter(scn.escrows.values()))
    broken = copy.deepcopy(esc.diffs)
    start = next(tx for d in broken for tx in d["txs"] if "start_inference" in tx)
    broken[-1]["txs"].append(copy.deepcopy(start))  # a second start of an inference, in the settlement nonce
    with pytest.raises(sealing.SealError, match=rf"escrow {esc.escrow_id}: the generated log breaks a v5 rule: "
                                                rf"nonce {esc.last_nonce}"):
        sealing.seal(esc, scn.keys, broken)


def test_a_replay_that_disagrees_with_the_reference_machine_stops_generation(scn):
    esc = next(iter(scn.escrows.values()))
    sealed = sealing.seal(esc, scn.keys)
    sealing.check_against_reference(esc, sealed)  # the honest log agrees
    iid, rec = next((i, r) for i, r in esc.state.records.items() if r.status != TIMED_OUT)
    status, rec.status = rec.status, TIMED_OUT
    try:
        with pytest.raises(sealing.SealError, match=rf"escrow {esc.escrow_id} inference {iid}: replayed"):
            sealing.check_against_reference(esc, sealed)
    finally:
        rec.status = status
    stats = esc.state.stats[0]
    stats.missed += 1
    try:
        with pytest.raises(sealing.SealError, match=rf"escrow {esc.escrow_id} slot 0: replayed host stats"):
            sealing.check_against_reference(esc, sealed)
    finally:
        stats.missed -= 1


def test_lying_kinds_and_a_log_without_a_finish(scn):
    esc = next(iter(scn.escrows.values()))
    with pytest.raises(ValueError, match="lying kind 'forged': 'altered' or 'fork'"):
        sealing.fork(esc, scn.keys, "forged")
    bare = SimpleNamespace(escrow_id="77", protocol_version="v5", diffs=[{"nonce": 1, "txs": []}], slots=esc.slots)
    with pytest.raises(sealing.SealError, match="escrow 77: no Finish to alter"):
        sealing.altered_copy(bare, scn.keys)


def test_grants_raw_transactions_and_unknown_hashes(scn):
    esc = next(iter(scn.escrows.values()))
    host = esc.slots[0]
    with DevnetServer(scn) as net, httpx.Client(timeout=30) as c:
        net.advance_epoch()
        url = f"{net.chain_rest_url}{CHAIN}/grantees_by_message_type/{host}"
        grants = c.get(f"{url}/{quote(WARM_GRANT_TYPE, safe='')}").json()["grantees"]
        warm = scn.keys.warm_of(host)
        assert grants == [{"address": warm, "pub_key": base64.b64encode(scn.keys.public_key(warm)).decode()}]
        assert c.get(f"{url}/{quote('/cosmos.bank.v1beta1.MsgSend', safe='')}").json() == {"grantees": []}
        settled = c.get(f"{net.rpc_url}/tx_search",
                        params={"query": f"\"devshard_escrow_settled.escrow_id='{esc.escrow_id}'\""}).json()
        (found,) = settled["result"]["txs"]
        assert found["hash"] == hashlib.sha256(base64.b64decode(found["tx"])).hexdigest().upper()
        one = c.get(f"{net.rpc_url}/tx", params={"hash": "0x" + found["hash"]}).json()["result"]
        assert one == found
        absent = c.get(f"{net.rpc_url}/tx", params={"hash": "0x" + "00" * 32})
        assert absent.status_code == 500 and "not found" in absent.json()["error"]["data"]
        got = c.get(f"{net.url}/chain-api/cosmos/tx/v1beta1/txs/{found['hash']}").json()
        assert got["tx_response"]["tx"]["@type"] == "/cosmos.tx.v1beta1.Tx"
        (message,) = got["tx"]["body"]["messages"]
        assert message["settler"] == esc.creator and int(message["fees"]) == esc.fees
        assert len(message["signatures"]) >= 2 * len(esc.slots) // 3 + 1


def test_a_version_without_ported_rules_still_serves_its_network():
    """v4 has a wire table but no ported session rules: the devnet still serves it, with a stand-in root and no
    settlement transaction to look up (a verifier stops at the signature check)."""
    scn = Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=1, inferences_per_escrow=8,
                                  protocol_version="v4"))
    esc = next(iter(scn.escrows.values()))
    assert esc.sealed.session is None and len(esc.roots) == len(esc.diffs)
    assert scn.settlement(esc, 1) is None
    with DevnetServer(scn) as net, httpx.Client(timeout=30) as c:
        net.advance_epoch()
        settled = c.get(f"{net.rpc_url}/tx_search",
                        params={"query": f"\"devshard_escrow_settled.escrow_id='{esc.escrow_id}'\""}).json()
        (found,) = settled["result"]["txs"]
        assert c.get(f"{net.url}/chain-api/cosmos/tx/v1beta1/txs/{found['hash']}").status_code == 404

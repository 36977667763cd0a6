"""The devnet signs and hashes like the network: an evidence bundle built only from what it serves over HTTP (chain
REST, CometBFT RPC, a host's diff log) verifies up to ``settled`` for every escrow, and a lying host's log fails the
check its lie breaks, at the nonce where it starts."""
from __future__ import annotations

import base64
import json
from urllib.parse import quote

import httpx
import pytest

from indexer.devnet import DevnetServer, FaultConfig, Scenario, ScenarioConfig
from indexer.verify import proto as pb, settlement as st, signatures as sig
from indexer.verify.__main__ import main as verify_main
from indexer.verify.apply import Config
from indexer.verify.bundle import Bundle, Host, Settlement, SignedDiff
from indexer.verify.evidence import verify_bundle

CHAIN = "/productscience/inference/inference"
WARM_GRANT = "/inference.inference.MsgStartInference"
PAGE = 64

# (name, config) of the scenarios every escrow of which is checked
DEFAULT = ScenarioConfig(protocol_version="v4.1")
DEMO = ScenarioConfig(seed=2078, epochs=3, escrows_per_epoch=3, inferences_per_escrow=60, protocol_version="v4.1")


def _b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


class Fetch:
    """Reads one escrow's evidence from the network's public endpoints, as a committee member would."""

    def __init__(self, client: httpx.Client, net: DevnetServer) -> None:
        self.c, self.net = client, net
        self._grants: dict[str, tuple[str, ...]] = {}

    def chain(self, path: str) -> dict:
        r = self.c.get(f"{self.net.chain_rest_url}{CHAIN}/{path}")
        r.raise_for_status()
        return r.json()

    def warm_keys(self, participant: str) -> tuple[str, ...]:
        if participant not in self._grants:
            body = self.chain(f"grantees_by_message_type/{participant}/{quote(WARM_GRANT, safe='')}")
            self._grants[participant] = tuple(g["address"] for g in body["grantees"])
        return self._grants[participant]

    def diffs(self, host_url: str, version: str, escrow_id: str) -> list[SignedDiff]:
        last = self.c.get(f"{host_url}/devshard/{version}/stats/shards/{escrow_id}").json()["nonce"]
        out = []
        for first in range(1, last + 1, PAGE):
            r = self.c.get(f"{host_url}/devshard/{version}/sessions/{escrow_id}/diffs",
                           params={"from": first, "to": min(last, first + PAGE - 1)})
            for entry in r.json():
                d = entry["diff"]
                # the host serves DiffContent{nonce, txs} and the root beside it; the user signed BuildDiffContent
                content = (_b64(d["txs"]) + pb.f_str(3, escrow_id)
                           + pb.f_bytes(4, _b64(d.get("post_state_root", ""))))
                out.append(SignedDiff(d["nonce"], content, _b64(d["user_sig"])))
        return out

    def settlement(self, escrow_id: str, params: dict) -> Settlement:
        r = self.c.get(f"{self.net.rpc_url}/tx_search",
                       params={"query": f"\"devshard_escrow_settled.escrow_id='{escrow_id}'\""})
        (found,) = r.json()["result"]["txs"]
        raw = _b64(found["tx"])
        got = self.c.get(f"{self.net.url}/chain-api/cosmos/tx/v1beta1/txs/{found['hash']}").json()
        (message,) = got["tx"]["body"]["messages"]
        assert message["@type"] == st.SETTLE_TYPE_URL and got["tx_response"]["txhash"] == found["hash"]
        assert got["tx_response"]["height"] == found["height"]
        (msg,) = st.settle_msgs_in_tx(raw)
        decoded = st.decode_settle_msg(msg)  # the JSON and the broadcast bytes say the same
        assert (message["escrow_id"], message["nonce"], _b64(message["state_root"])) == (
            str(decoded.escrow_id), str(decoded.nonce), decoded.state_root)
        return Settlement(msg=msg, max_nonce=int(params["max_nonce"]),
                          approved_versions=tuple(v["name"] for v in params["approved_versions"]),
                          tx_hash=found["hash"], height=int(found["height"]), tx_raw=raw)

    def bundle(self, escrow_id: str, host: str) -> Bundle:
        esc = self.chain(f"devshard_escrow/{escrow_id}")["escrow"]
        params = self.chain("params")["params"]["devshard_escrow_params"]
        host_url = self.net.host_url(host)
        any_version = self.c.get(f"{host_url}/devshard/healthz").json()[0]["name"]  # observability is versionless
        version = self.c.get(f"{host_url}/devshard/{any_version}/stats/shards/{escrow_id}").json()["version"]
        slots = esc["slots"]
        config = Config(token_price=int(esc["token_price"]),
                        vote_threshold=len(slots) * int(esc["vote_threshold_factor"]) // 100,
                        seal_grace_nonces=int(esc["inference_seal_grace_nonces"]),
                        seal_grace_seconds=int(esc["inference_seal_grace_seconds"]),
                        auto_seal_every=int(esc["auto_seal_every_n_nonces"]),
                        fee_per_nonce=int(esc["fee_per_nonce"]), create_fee=int(esc["create_devshard_fee"]))
        return Bundle(escrow_id=escrow_id, protocol_version=version, creator=esc["creator"],
                      amount=int(esc["amount"]),
                      group=tuple(Host(i, a, self.warm_keys(a)) for i, a in enumerate(slots)),
                      config=config, diffs=tuple(self.diffs(host_url, version, escrow_id)),
                      settlement=self.settlement(escrow_id, params))


def _every_escrow_settles(config: ScenarioConfig) -> int:
    scn = Scenario(config)
    checked = 0
    with DevnetServer(scn) as net, httpx.Client(timeout=30) as client:
        fetch = Fetch(client, net)
        for epoch in scn.epochs:
            net.devnet.current_epoch = epoch.epoch_index + 1  # settled, not yet pruned
            for esc in epoch.escrows:
                report = verify_bundle(fetch.bundle(esc.escrow_id, esc.slots[-1]))
                assert report.level == "settled" and report.ok, (esc.escrow_id, report.to_dict())
                checked += 1
    return checked


@pytest.mark.parametrize("config", [DEFAULT, DEMO], ids=["default", "demo"])
def test_every_escrow_verifies_from_what_the_devnet_serves(config):
    assert _every_escrow_settles(config) == config.epochs * config.escrows_per_epoch


@pytest.fixture(scope="module")
def small():
    return Scenario(ScenarioConfig(seed=3, epochs=1, escrows_per_epoch=1, inferences_per_escrow=20,
                                   protocol_version="v4.1"))


@pytest.mark.parametrize("kind,check", [("altered", "signed"), ("fork", "settled")])
def test_the_lying_host_fails_a_check(small, kind, check):
    esc = next(iter(small.escrows.values()))
    liar, honest = esc.slots[0], next(a for a in esc.slots if a != esc.slots[0])
    _, sealed, diverged = small.lying_log(esc, kind)
    with DevnetServer(small, faults=FaultConfig(lying_host=liar, lying_kind=kind)) as net, \
            httpx.Client(timeout=30) as client:
        net.advance_epoch()
        fetch = Fetch(client, net)
        assert verify_bundle(fetch.bundle(esc.escrow_id, honest)).ok
        report = verify_bundle(fetch.bundle(esc.escrow_id, liar))
    assert report.failed_step == check
    # the altered log fails where the lie starts; the user-signed fork replays to its end, then meets the honest
    # settlement
    assert report.failed_nonce == (diverged if kind == "altered" else esc.last_nonce)
    assert report.level == ("none" if kind == "altered" else "replayed")
    assert sealed.roots[diverged - 2] == esc.roots[diverged - 2] and sealed.roots[diverged - 1] != esc.roots[diverged - 1]


def test_signatures_recover_to_each_slots_warm_key_and_the_bundle_file_verifies(small, tmp_path, capsys):
    esc = next(iter(small.escrows.values()))
    with DevnetServer(small) as net, httpx.Client(timeout=30) as client:
        net.advance_epoch()
        url = f"{net.host_url(esc.slots[0])}/devshard/v4.1/sessions/{esc.escrow_id}/signatures"
        got = client.get(url, params={"nonce": esc.last_nonce}).json()["signatures"]
        signed = sig.state_signature_bytes(state_root=esc.roots[-1], escrow_id=esc.escrow_id, nonce=esc.last_nonce)
        assert {int(k): sig.recover_address(signed, _b64(v)) for k, v in got.items()} == {
            i: small.keys.warm_of(a) for i, a in enumerate(esc.slots)}
        assert client.get(url, params={"nonce": esc.last_nonce + 1}).status_code == 404
        missing = client.get(f"{net.url}/chain-api/cosmos/tx/v1beta1/txs/{'AB' * 32}")
        assert missing.status_code == 404 and missing.json()["code"] == 5
        path = tmp_path / "bundle.json"
        path.write_text(Fetch(client, net).bundle(esc.escrow_id, esc.slots[0]).to_json())
    assert verify_main([str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["level"] == "settled"

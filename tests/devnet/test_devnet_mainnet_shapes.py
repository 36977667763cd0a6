"""The devnet's chain REST has mainnet's structure (keys, nesting, JSON types) for every endpoint with a capture in
tests/cases/fixtures/mainnet/, so the devnet cannot drift from the real chain again; and it answers the height header
as a cosmos-sdk node does, pruning included."""
from __future__ import annotations

import json

import pytest

from indexer.devnet import Scenario, ScenarioConfig
from indexer.devnet.routes import CHAIN_PREFIX, App, AppOptions
from indexer.devnet.world import Devnet
from indexer.sources.gonka.chain import _pruned_answer
from tests.support.mainnet_fixtures import epoch_info_shape, load, structure_diff

# the parameter groups the indexer reads; the devnet leaves the others (poc, tokenomics, …) out
PARAM_GROUPS = ("epoch_params", "validation_params", "bitcoin_reward_params", "devshard_escrow_params",
                "delegation_params")


@pytest.fixture(scope="module")
def app() -> App:
    net = Devnet(Scenario(ScenarioConfig(seed=7, epochs=3, escrows_per_epoch=2, inferences_per_escrow=24)))
    net.advance_epoch()
    net.advance_epoch()  # current 410: 408 and 409 have ended
    return App(net)


def get(app: App, path: str, headers=None, **query):
    resp = app.handle("GET", CHAIN_PREFIX + path, {k: [v] for k, v in query.items()}, headers or {})
    return resp.status, json.loads(resp.body), resp.headers


def _params_part(params: dict) -> dict:
    return {k: params[k] for k in PARAM_GROUPS}


def test_root_epoch_group_has_mainnets_structure(app):
    status, body, _ = get(app, "/epoch_group_data/409")
    assert status == 200
    assert structure_diff(load("epoch_group_data_267.json"), body) == []
    assert body["epoch_group_data"]["last_block_height"] != "0"  # ended: the end height is published


def test_model_epoch_group_has_mainnets_structure(app):
    _, root, _ = get(app, "/epoch_group_data/409")
    model = root["epoch_group_data"]["sub_group_models"][0]
    status, body, _ = get(app, "/epoch_group_data/409", model_id=model)
    assert status == 200
    assert structure_diff(load("epoch_group_data_267_model_moonshotai_Kimi-K2.6.json"), body) == []


@pytest.mark.parametrize("capture", ["params_e366.json", "params_e267.json"])
def test_params_groups_have_mainnets_structure(app, capture):
    _, body, _ = get(app, "/params")
    real = load(capture)["params"]
    if capture == "params_e267.json":
        # before devshard v3 the escrow params had no validation_rate / vote_threshold_factor / fees: the devnet
        # serves the newer set, which the e366 capture pins; compare the other groups with the older capture
        real = {k: v for k, v in real.items() if k != "devshard_escrow_params"}
        real["devshard_escrow_params"] = load("params_e366.json")["params"]["devshard_escrow_params"]
    assert structure_diff(_params_part(real), _params_part(body["params"])) == []


def test_epoch_info_has_the_real_response_shape(app):
    _, body, _ = get(app, "/epoch_info")
    real = epoch_info_shape()
    assert body.keys() == real.keys()
    assert structure_diff(real["latest_epoch"], body["latest_epoch"]) == []
    assert structure_diff(_params_part(real["params"]), _params_part(body["params"])) == []
    assert isinstance(body["block_height"], str)


@pytest.mark.parametrize("capture", ["epoch_performance_summary_267_gonka10mmdjau4dnj8krs7sh7t7635ttnmq9u3vqgz09.json",
                                     "epoch_performance_summary_366_gonka1scskt6wpnjnumsah6kjphmdu87vjgvcxmn4rxv.json"])
def test_performance_summary_has_mainnets_structure(app, capture):
    host = app.net.scenario.hosts[0].address
    status, body, _ = get(app, f"/epoch_performance_summary/409/{host}")
    assert status == 200
    assert structure_diff(load(capture), body) == []
    assert get(app, f"/epoch_performance_summary/410/{host}")[0] == 404  # the running epoch has none yet


def test_excluded_participants_has_mainnets_structure(app):
    _, body, _ = get(app, "/excluded_participants/409")
    assert body["items"], "the scenario should exclude someone in an ended epoch"
    assert structure_diff(load("excluded_participants_366.json"), body) == []
    assert get(app, "/excluded_participants/410")[1] == {"items": []}


def test_height_header_recent_pruned_and_future(app):
    latest = app.net.latest_height()
    end_409 = int(get(app, "/epoch_group_data/409")[1]["epoch_group_data"]["last_block_height"])
    status, body, headers = get(app, "/params", {"x-cosmos-block-height": str(end_409)})
    assert status == 200 and headers["Grpc-Metadata-X-Cosmos-Block-Height"] == str(end_409)
    end_408 = int(get(app, "/epoch_group_data/408")[1]["epoch_group_data"]["last_block_height"])
    status, body, _ = get(app, "/params", {"x-cosmos-block-height": str(end_408)})
    assert status == 500 and body["code"] == 2
    assert body["message"].startswith(f"failed to load state at height {end_408};")
    assert _pruned_answer(status, json.dumps(body).encode())
    status, body, _ = get(app, "/params", {"x-cosmos-block-height": str(latest + 1)})
    assert status == 400 and not _pruned_answer(status, json.dumps(body).encode())


def test_params_at_a_height_before_the_governance_change(app):
    start_408 = int(get(app, "/epoch_group_data/408")[1]["epoch_group_data"]["poc_start_block_height"])
    archive = App(app.net, AppOptions(state_retain_blocks=10**9))
    old = get(archive, "/params", {"x-cosmos-block-height": str(start_408)})[1]["params"]["validation_params"]
    live = get(archive, "/params")[1]["params"]["validation_params"]
    assert old["invalidation_h_threshold"] == {"value": "4", "exponent": 0}
    assert live["invalidation_h_threshold"] == {"value": "4", "exponent": 1}
    root_408 = get(app, "/epoch_group_data/408")[1]["epoch_group_data"]
    assert root_408["validation_params"]["invalidation_h_threshold"] == {"value": "4", "exponent": 0}


def test_every_chain_rest_answer_says_the_height_it_served(app):
    """cosmos-sdk sets x-cosmos-block-height on every gRPC query answer (baseapp/grpcserver.go), which the gateway
    forwards: the grants read of a warm key as of a height says that height, a live read the latest."""
    latest = app.net.latest_height()
    end_409 = int(get(app, "/epoch_group_data/409")[1]["epoch_group_data"]["last_block_height"])
    host = sorted(app.net.scenario.hosts_by_address)[0]
    grants = f"/grantees_by_message_type/{host}/%2Finference.inference.MsgStartInference"
    for path in (grants, "/epoch_group_data/409", "/params"):
        status, _, headers = get(app, path, {"x-cosmos-block-height": str(end_409)})
        assert status == 200 and headers["Grpc-Metadata-X-Cosmos-Block-Height"] == str(end_409), path
        assert get(app, path)[2]["Grpc-Metadata-X-Cosmos-Block-Height"] == str(latest), path

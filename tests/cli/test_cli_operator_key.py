"""``indexer run`` in operator mode checks at start that the key file holds the configured address's key (or a
grantee's): a key of another address stops the start with exit 2 and one line naming both addresses, never the key;
the right key runs the cycle."""
from __future__ import annotations

from indexer.cli import main
from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.devnet.operators import devnet_secret, write_operator_key
from indexer.sources.gonka.signing import Operator


def _run(net, db_url, address: str, key_path) -> int:
    return main(["run", "--once", "--database-url", db_url, "--gonka-chain-rest-url", net.chain_rest_url,
                 "--gonka-rpc-url", net.rpc_url, "--gonka-operator-address", address,
                 "--gonka-operator-key-file", str(key_path), "--allow-private-hosts", "--no-alerts",
                 "--metrics-addr", "off"])


def test_run_refuses_a_key_of_another_address_and_runs_with_the_right_one(db_url, tmp_path, capsys):
    scn = Scenario(ScenarioConfig(seed=5, epochs=1, escrows_per_epoch=1, inferences_per_escrow=8))
    address, other = scn.hosts[0].address, scn.hosts[1].address
    wrong = write_operator_key(tmp_path / "wrong.key", scn.config.seed, other)
    right = write_operator_key(tmp_path / "right.key", scn.config.seed, address)
    with DevnetServer(scn, payload_auth=True) as net:
        capsys.readouterr()
        assert _run(net, db_url, address, wrong) == 2
        err = capsys.readouterr().err.strip()
        key_address = Operator(address, devnet_secret(scn.config.seed, other)).key_address
        assert len(err.splitlines()) == 1 and address in err and key_address in err
        assert devnet_secret(scn.config.seed, other).hex() not in err
        assert _run(net, db_url, address, right) == 0

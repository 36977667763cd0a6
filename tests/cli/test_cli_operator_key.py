"""``indexer run`` in operator mode checks at start that the key file holds the configured address's key (or a
grantee's): a key of another address stops the start with exit 2 and one line naming both addresses, never the key;
the right key runs the cycle."""
from __future__ import annotations

import http.server
import threading

from indexer.cli import main
from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.devnet.operators import write_operator_key
from indexer.sources.gonka.signing import Operator


def _run(net, db_url, address: str, key_path) -> int:
    return main(["run", "--once", "--database-url", db_url, "--gonka-chain-rest-url", net.chain_rest_url,
                 "--gonka-rpc-url", net.rpc_url, "--gonka-operator-address", address,
                 "--gonka-operator-key-file", str(key_path), "--allow-private-hosts", "--no-alerts",
                 "--metrics-addr", "off"])


def test_run_refuses_a_key_of_another_address_and_runs_with_the_right_one(db_url, tmp_path, capsys):
    scn = Scenario(ScenarioConfig(seed=5, epochs=1, escrows_per_epoch=1, inferences_per_escrow=8))
    address, other = scn.hosts[0].address, scn.hosts[1].address
    wrong = write_operator_key(tmp_path / "wrong.key", scn.keys, other)
    right = write_operator_key(tmp_path / "right.key", scn.keys, address)
    with DevnetServer(scn, payload_auth=True) as net:
        capsys.readouterr()
        assert _run(net, db_url, address, wrong) == 2
        err = capsys.readouterr().err.strip()
        key_address = Operator(address, scn.keys.secret_of(other)).key_address
        assert len(err.splitlines()) == 1 and address in err and key_address in err
        assert scn.keys.secret_of(other).hex() not in err
        assert _run(net, db_url, address, right) == 0


class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(403)
        self.end_headers()
        self.wfile.write(b"forbidden by proxy\nsecond line")

    def log_message(self, *args):
        pass


def test_a_chain_that_does_not_answer_the_key_check_stops_the_start_with_one_line(db_url, tmp_path, capsys):
    scn = Scenario(ScenarioConfig(seed=5, epochs=1, escrows_per_epoch=1, inferences_per_escrow=8))
    address, other = scn.hosts[0].address, scn.hosts[1].address
    key = write_operator_key(tmp_path / "other.key", scn.keys, other)  # not the address's own: the chain is asked
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        capsys.readouterr()
        code = main(["run", "--once", "--database-url", db_url, "--gonka-chain-rest-url", url, "--gonka-rpc-url", url,
                     "--gonka-operator-address", address, "--gonka-operator-key-file", str(key), "--no-alerts",
                     "--metrics-addr", "off"])
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1, err
    assert err.lower().startswith("error: the operator key check could not read the chain: http 403: forbidden by proxy")
    assert f"({url}/cosmos/auth/v1beta1/accounts/{address})" in err and "not started" in err
    assert scn.keys.secret_of(other).hex() not in err

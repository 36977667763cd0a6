"""Operator mode: payload requests signed as devshard hosts check them (authenticatePayloadRequest), the devnet's
refusals of every bad kind, and the key kept out of logs, errors, reprs and the raw-response archive."""
from __future__ import annotations

import base64
import logging
import os
import time

import httpx
import psycopg
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.devnet.operators import verify_cosmos_secp256k1, write_operator_key
from indexer.poller import poll_once
from indexer.sources.gonka import DevshardHost, FetchError, Fetcher, RetryPolicy
from indexer.sources.gonka.host import stored_response_payload
from indexer.sources.gonka.signing import (
    SECP256K1_N, Operator, OperatorConfigError, operator_from_env, payload_sign_bytes, read_key_file,
)

SECRET = bytes.fromhex("6a1f3c0e9b2d47a5c8e1f0b3d2a4c6e8f1a3b5c7d9e0f2a4b6c8d0e2f4a6b8c1")
FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=3)


def _scenario() -> Scenario:
    return Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=3, inferences_per_escrow=30))


def _zero_zero(scn: Scenario, escrow_id: str) -> dict[int, str]:
    """inference_id → stored payload of the 0/0 Finishes (what the poller asks hosts for)."""
    return {r["inference_id"]: r["response_payload"] for r in scn.tx_records(escrow_id)
            if r["kind"] == "finish" and r.get("response_payload") is not None
            and r["input_tokens"] == 0 and r["output_tokens"] == 0}


def _operator_host(scn: Scenario) -> tuple[str, list[str], list[str]]:
    """A participant that is in the group of some escrows with 0/0 Finishes and outside others."""
    with_payloads = [e for e in scn.escrows.values() if _zero_zero(scn, e.escrow_id)]
    for h in scn.hosts:
        inside = [e.escrow_id for e in with_payloads if h.address in e.slots]
        outside = [e.escrow_id for e in with_payloads if h.address not in e.slots]
        if inside and outside:
            return h.address, inside, outside
    raise AssertionError("scenario has no host both inside and outside a group")


def _key_file(tmp_path, secret: bytes = SECRET, mode: int = 0o600):
    path = tmp_path / "operator.key"
    path.write_text(secret.hex() + "\n")
    os.chmod(path, mode)
    return path


# -- the signed bytes and the signature ------------------------------------------------------------------------

def test_signed_bytes_are_getdevbytes():
    # inference_id ‖ epoch ‖ timestamp ‖ address, decimal, no separators; epoch 0 and timestamp ≤ 0 left out
    assert payload_sign_bytes("6149", 408, 1790812800123456789, "gonka1hostB") == \
        b"61494081790812800123456789gonka1hostB"
    assert payload_sign_bytes("6149", 0, 1790812800123456789, "gonka1hostB") == b"61491790812800123456789gonka1hostB"
    assert payload_sign_bytes("7", 408, 0, "gonka1x") == b"7408gonka1x"


def test_signature_verifies_with_an_independent_library():
    op = Operator("gonka1hostB", SECRET)
    message = payload_sign_bytes("6149", 408, 1790812800123456789, "gonka1hostB")
    sig = base64.b64decode(op.sign(message), validate=True)
    assert len(sig) == 64  # r ‖ s, not DER
    r, s = int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")
    assert 0 < s <= SECP256K1_N // 2  # low s: Cosmos refuses the malleable twin
    # cryptography (OpenSSL) checks ECDSA/secp256k1 over sha256 of the same bytes under the compressed key
    pub = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), op.public_key)
    pub.verify(encode_dss_signature(r, s), message, ec.ECDSA(hashes.SHA256()))
    with pytest.raises(InvalidSignature):
        pub.verify(encode_dss_signature(r, s), message + b"x", ec.ECDSA(hashes.SHA256()))
    # the public key is the one of the private scalar, derived by the other library
    priv = ec.derive_private_key(int.from_bytes(SECRET, "big"), ec.SECP256K1())
    assert priv.public_key().public_numbers() == pub.public_numbers()
    assert op.sign(message) == op.sign(message)  # RFC 6979: deterministic, like the Cosmos keyring


def test_devnet_verifier_follows_cosmos_rules():
    """A signature made by the other library verifies; its high-s twin and a DER encoding do not."""
    priv = ec.derive_private_key(int.from_bytes(SECRET, "big"), ec.SECP256K1())
    pub = Operator("a", SECRET).public_key
    message = b"61494081790812800123456789gonka1hostB"
    r, s = decode_dss_signature(priv.sign(message, ec.ECDSA(hashes.SHA256())))
    low, high = min(s, SECP256K1_N - s), max(s, SECP256K1_N - s)
    compact = lambda s_: r.to_bytes(32, "big") + s_.to_bytes(32, "big")  # noqa: E731
    assert verify_cosmos_secp256k1(pub, message, compact(low))
    assert not verify_cosmos_secp256k1(pub, message, compact(high))
    assert not verify_cosmos_secp256k1(pub, message, encode_dss_signature(r, low))
    assert not verify_cosmos_secp256k1(pub, message + b"!", compact(low))


# -- key files and settings ------------------------------------------------------------------------------------

def test_key_file_with_loose_permissions_is_refused(tmp_path):
    for mode in (0o644, 0o640, 0o604, 0o660):
        path = _key_file(tmp_path, mode=mode)
        with pytest.raises(OperatorConfigError) as exc:
            read_key_file(path)
        assert "chmod 600" in str(exc.value) and f"{mode:04o}" in str(exc.value)
        assert SECRET.hex() not in str(exc.value) and SECRET.hex() not in repr(exc.value)
        path.unlink()
    assert read_key_file(_key_file(tmp_path)) == SECRET


def test_bad_key_files_name_the_file_never_the_content(tmp_path):
    cases = {"short": SECRET.hex()[:-2], "junk": SECRET.hex()[:-1] + "z", "zero": "00" * 32,
             "armored": "-----BEGIN TENDERMINT PRIVATE KEY-----\nkdf: bcrypt\n" + SECRET.hex() + "\n-----END"}
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        os.chmod(path, 0o600)
        with pytest.raises(OperatorConfigError) as exc:
            read_key_file(path)
        assert str(path) in str(exc.value)
        assert SECRET.hex()[:16] not in str(exc.value)
    assert "unarmored-hex" in str(pytest.raises(OperatorConfigError, read_key_file, tmp_path / "armored").value)
    with pytest.raises(OperatorConfigError, match="No such file"):
        read_key_file(tmp_path / "missing")
    path = tmp_path / "prefixed"
    path.write_text("  0x" + SECRET.hex().upper() + "\n\n")
    os.chmod(path, 0o400)
    assert read_key_file(path) == SECRET


def test_operator_from_env(tmp_path):
    path = _key_file(tmp_path)
    assert operator_from_env({}) is None
    op = operator_from_env({"GONKA_OPERATOR_ADDRESS": "gonka1hostB", "GONKA_OPERATOR_KEY_FILE": str(path)})
    assert (op.address, op.member) == ("gonka1hostB", "gonka1hostB")
    # lower-cased names (parsed CLI options) and a warm key acting for its granter
    op = operator_from_env({"gonka_operator_address": "gonka1hostB-warm", "gonka_operator_key_file": str(path),
                            "gonka_operator_member": "gonka1hostB"})
    assert (op.address, op.member) == ("gonka1hostB-warm", "gonka1hostB")
    with pytest.raises(OperatorConfigError, match="GONKA_OPERATOR_KEY_FILE is set but GONKA_OPERATOR_ADDRESS"):
        operator_from_env({"GONKA_OPERATOR_KEY_FILE": str(path)})
    with pytest.raises(OperatorConfigError, match="GONKA_OPERATOR_ADDRESS is set but GONKA_OPERATOR_KEY_FILE"):
        operator_from_env({"GONKA_OPERATOR_ADDRESS": "gonka1hostB"})
    for text in (repr(op), str(op)):
        assert "redacted" in text and SECRET.hex() not in text
    with pytest.raises(TypeError):
        __import__("pickle").dumps(op)


# -- the devnet's payload route with authentication -------------------------------------------------------------

@pytest.fixture(scope="module")
def authnet():
    scn = _scenario()
    with DevnetServer(scn, payload_auth=True) as net:
        yield net


def _case(scn: Scenario):
    address, inside, outside = _operator_host(scn)
    esc = scn.escrows[inside[0]]
    iid = next(iter(_zero_zero(scn, esc.escrow_id)))
    return address, esc, iid, scn.escrows[outside[0]]


def _get(net, esc, iid, headers, host=None):
    url = f"{net.host_url(host or esc.slots[0])}/devshard/{esc.protocol_version}/sessions/{esc.escrow_id}/payloads"
    return httpx.get(url, params={"inference_id": str(iid)}, headers=headers, timeout=5)


def test_devnet_serves_a_signed_member_request(authnet):
    scn = authnet.scenario
    address, esc, iid, _ = _case(scn)
    op = Operator(address, scn.keys.secret_of(address))
    r = _get(authnet, esc, iid, op.payload_headers(iid, esc.epoch_index))
    assert r.status_code == 200 and stored_response_payload(r.json()) == esc.log.payloads[iid]
    # a warm key of the member, under its own address, is a member too (findGranterInGroup)
    warm = Operator(scn.keys.warm_of(address), scn.keys.secret_of(scn.keys.warm_of(address)), member=address)
    assert _get(authnet, esc, iid, warm.payload_headers(iid, esc.epoch_index)).status_code == 200
    # the member's address signed with its warm key: getValidatorPubKeys lists the grantees' keys as well
    cold_name = Operator(address, scn.keys.secret_of(scn.keys.warm_of(address)))
    assert _get(authnet, esc, iid, cold_name.payload_headers(iid, esc.epoch_index)).status_code == 200
    # epoch 0 (old devshardd builds) is left out of the signed bytes and still accepted
    assert _get(authnet, esc, iid, op.payload_headers(iid, 0)).status_code == 200


def test_devnet_refuses_each_bad_kind_like_the_host(authnet):
    scn = authnet.scenario
    address, esc, iid, other = _case(scn)
    op = Operator(address, scn.keys.secret_of(address))
    epoch, now = esc.epoch_index, time.time_ns()
    good = op.payload_headers(iid, epoch)

    def without(name):
        return {k: v for k, v in good.items() if k != name}

    def resigned(**changes):
        h = {**good, **changes}
        msg = payload_sign_bytes(str(iid), int(h["X-Epoch-Id"]), int(h["X-Timestamp"]), h["X-Validator-Address"])
        return {**h, "Authorization": op.sign(msg)}

    sig = base64.b64decode(good["Authorization"])
    high_s = sig[:32] + (SECP256K1_N - int.from_bytes(sig[32:], "big")).to_bytes(32, "big")
    stranger = Operator(address, bytes.fromhex("11" * 32))
    outsider = next(h.address for h in scn.hosts if h.address not in esc.slots)
    cases = {
        "unsigned": ({k: v for k, v in good.items() if k != "Authorization"}, 401, "Authorization header required"),
        "no address": (without("X-Validator-Address"), 400, "X-Validator-Address header required"),
        "no timestamp": (without("X-Timestamp"), 400, "X-Timestamp header required"),
        "no epoch": (without("X-Epoch-Id"), 400, "X-Epoch-Id header required"),
        "seconds, not ns": ({**good, "X-Timestamp": "1.5"}, 400, "invalid timestamp format"),
        "epoch not a number": ({**good, "X-Epoch-Id": "latest"}, 400, "invalid epoch_id format"),
        "stale": (resigned(**{"X-Timestamp": str(now - 61 * 10**9)}), 400, "request timestamp too old"),
        "future": (resigned(**{"X-Timestamp": str(now + 11 * 10**9)}), 400, "request timestamp in the future"),
        "wrong epoch": ({**good, "X-Epoch-Id": str(epoch + 1)}, 401, "invalid signature"),
        "other key": (stranger.payload_headers(iid, epoch), 401, "invalid signature"),
        "high s": ({**good, "Authorization": base64.b64encode(high_s).decode()}, 401, "invalid signature"),
        "not base64": ({**good, "Authorization": "Bearer " + good["Authorization"]}, 401, "invalid signature"),
        "non-member": (Operator(outsider, scn.keys.secret_of(outsider)).payload_headers(iid, epoch),
                       401, "not a group member"),
    }
    for name, (headers, status, message) in cases.items():
        r = _get(authnet, esc, iid, headers)
        assert (r.status_code, r.json()) == (status, {"message": message}), name
    # a signature for one inference id does not open another
    other_iid = next(i for i in esc.log.payloads if i != iid)
    r = _get(authnet, esc, other_iid, good)
    assert (r.status_code, r.json()) == (401, {"message": "invalid signature"})
    r = httpx.get(f"{authnet.host_url(esc.slots[0])}/devshard/{esc.protocol_version}/sessions/{esc.escrow_id}/payloads", headers=good)
    assert (r.status_code, r.json()) == (400, {"message": "inference_id required"})
    r = _get(authnet, esc, 10**9, op.payload_headers(10**9, epoch))
    assert (r.status_code, r.json()) == (404, {"message": "payload not found"})


def test_host_client_signs_only_for_member_escrows(authnet):
    scn = authnet.scenario
    address, esc, iid, other = _case(scn)
    op = Operator(address, scn.keys.secret_of(address))
    with httpx.Client() as client:
        def host(member_url_of):
            return DevshardHost(member_url_of, Fetcher(authnet.host_url(member_url_of), policy=FAST, client=client),
                                operator=op)
        got = host(esc.slots[0]).payload(esc.protocol_version, esc.escrow_id, iid, validator="gonka1indexer",
                                         epoch=esc.epoch_index, members=esc.slots)
        assert got == esc.log.payloads[iid]
        # group unknown (no members, no groups lookup): unsigned, so refused for want of a signature
        with pytest.raises(FetchError) as exc:
            host(esc.slots[0]).payload(esc.protocol_version, esc.escrow_id, iid, validator="gonka1indexer", epoch=esc.epoch_index)
        assert exc.value.status == 401 and "Authorization header required" in str(exc.value)
        # an escrow whose group does not hold the operator: never signed
        other_iid = next(iter(_zero_zero(scn, other.escrow_id)))
        with pytest.raises(FetchError) as exc:
            host(other.slots[0]).payload(other.protocol_version, other.escrow_id, other_iid, validator="gonka1indexer",
                                         epoch=other.epoch_index, members=other.slots)
        assert exc.value.status == 401 and "Authorization header required" in str(exc.value)


def test_a_request_gone_stale_is_signed_afresh_once(authnet, monkeypatch):
    import indexer.sources.gonka.signing as signing

    scn = authnet.scenario
    address, esc, iid, _ = _case(scn)
    op = Operator(address, scn.keys.secret_of(address))
    real, stamps = time.time_ns, []

    def clock():  # the first signature is 61 s old by the time the host sees it (a retry after long timeouts)
        stamps.append(real() - (61 * 10**9 if not stamps else 0))
        return stamps[-1]

    monkeypatch.setattr(signing.time, "time_ns", clock)
    with httpx.Client() as client:
        host = DevshardHost(esc.slots[0], Fetcher(authnet.host_url(esc.slots[0]), policy=FAST, client=client),
                            operator=op, groups=lambda escrow_id: esc.slots)
        got = host.payload(esc.protocol_version, esc.escrow_id, iid, validator="gonka1indexer", epoch=esc.epoch_index)
    assert got == esc.log.payloads[iid] and len(stamps) == 2


def test_lax_devnet_keeps_the_unsigned_flow():
    scn = _scenario()
    address, esc, iid, _ = _case(scn)
    with DevnetServer(scn) as net:
        assert _get(net, esc, iid, {"X-Validator-Address": "gonka1indexer"}).status_code == 200
        assert _get(net, esc, iid, {}).status_code == 401


# -- end to end: a poll in operator mode, and where the key must not be -----------------------------------------

def test_poll_in_operator_mode_fills_member_payloads_and_keeps_the_key_out(db_url, tmp_path, monkeypatch, caplog):
    scn = _scenario()
    address, inside, outside = _operator_host(scn)
    key_path = write_operator_key(tmp_path / "operator.key", scn.keys, address)
    assert oct(os.stat(key_path).st_mode & 0o777) == oct(0o600)
    op = operator_from_env({"GONKA_OPERATOR_ADDRESS": address, "GONKA_OPERATOR_KEY_FILE": str(key_path)})
    signatures: list[str] = []
    sign = Operator.sign
    monkeypatch.setattr(Operator, "sign", lambda self, m: signatures.append(sign(self, m)) or signatures[-1])
    caplog.set_level(logging.DEBUG)
    with DevnetServer(scn, payload_auth=True) as net:
        poll_once(db_url, net.chain_rest_url, net.rpc_url, operator=op, policy=RetryPolicy(
            backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=8), private_hosts=True)
    with psycopg.connect(db_url) as c:
        got = {(e, int(i)): p for e, i, p in c.execute(
            "SELECT escrow_id, inference_id, response_payload FROM rec.finish_tx WHERE response_payload IS NOT NULL")}
        archive = c.execute("SELECT url, coalesce(convert_from(body, 'UTF8'), '') FROM net.raw_response").fetchall()
        secret = scn.keys.secret_of(address)
        raw_hits = c.execute("SELECT count(*) FROM net.raw_response WHERE position(%s::bytea IN body) > 0 "
                             "OR position(%s::bytea IN body) > 0", (secret, secret.hex().encode())).fetchone()[0]
        failures = c.execute("SELECT url, error FROM net.failure").fetchall()
        cursors = c.execute("SELECT coalesce(last_error, '') FROM net.cursor").fetchall()
    want = {(eid, i): p for eid in inside for i, p in _zero_zero(scn, eid).items()}
    assert got == want  # every 0/0 payload of the operator's escrows, none of the others
    assert not any(eid in outside for eid, _ in got)
    assert any("/payloads" in url for url, _ in archive)
    assert raw_hits == 0
    needles = {secret.hex(), secret.hex().upper(), base64.b64encode(secret).decode()}
    haystacks = [caplog.text, repr(op)] + [u + b for u, b in archive] + [u + e for u, e in failures] + \
        [e for (e,) in cursors]
    assert not [n for n in needles for h in haystacks if n in h]
    # nor any Authorization value that was sent (the archive holds URL, status and body, never request headers)
    assert signatures and not [sig for sig in signatures for h in haystacks if sig in h]

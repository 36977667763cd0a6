"""Operator mode's start-up check: the key file holds the key of the configured address, or of a grantee of it.

A host accepts a payload request signed by the member's own account key or by one of its warm keys (authz grantees
for ``/inference.inference.MsgStartInference``), and a Connect ``Attach`` only from the address its signature
recovers to. A key file holding some other key would be refused by every host, request after request; the check
refuses it once, at start, with a one-line error that names both addresses (never the key).

What the chain says about a key:

* its own address is bech32 ``gonka`` of ripemd160(sha256(compressed public key)) (:attr:`Operator.key_address`);
* ``/cosmos/auth/v1beta1/accounts/{address}`` gives an account's public key (``account.pub_key.key``, base64),
  as the host's ``AccountByAddress`` lookup does;
* ``grantees_by_message_type/{granter}/{msg type url, path-escaped}`` lists the warm keys ``{address, pub_key}``
  (the path form devshard's ``RESTBridge.VerifyWarmKey`` requests).

A key is the configured address's own when its address or its public key matches that account; a grantee's when a
listed grantee has its address or its public key. The address the key answers to then becomes the operator's
``peer_address`` (what ``Attach`` names).
"""
from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

from indexer.sources.gonka.chain import ChainRest
from indexer.sources.gonka.http import FetchError
from indexer.sources.gonka.signing import ENV_ADDRESS, ENV_KEY_FILE, ENV_MEMBER, Operator, OperatorConfigError

WARM_KEY_MSG_TYPE = "/inference.inference.MsgStartInference"


def public_key_text(value: Any) -> str | None:
    """The base64 key of a ``pub_key`` as the REST gateway renders it: ``{"@type": …, "key": "…"}`` or a string."""
    if isinstance(value, dict):
        value = value.get("key")
    return value if isinstance(value, str) and value else None



def account_public_key(chain: ChainRest, address: str) -> str | None:
    """The base64 public key of ``address``'s account, or None (no such account, or no key on it yet)."""
    try:
        data = chain.http.get_json(f"/cosmos/auth/v1beta1/accounts/{quote(address, safe='')}")
    except FetchError as exc:
        if exc.status == 404:
            return None
        raise
    account = data.get("account") if isinstance(data, dict) else None
    return public_key_text(account.get("pub_key")) if isinstance(account, dict) else None


def grantees(chain: ChainRest, granter: str) -> list[dict]:
    """The warm keys of ``granter`` (``grantees_by_message_type``), as listed now."""
    return grantees_at(chain, granter, None)[0]


def grantees_at(chain: ChainRest, granter: str, height: int | None) -> tuple[list[dict], int | None]:
    """The warm keys of ``granter`` as of ``height`` (None: live), and the height served; raises
    :class:`~indexer.sources.gonka.chain.HeightPruned` when no node serves that height, and FetchError for any
    other failed read. Only an answer lists grants, an empty list included: the chain answers an address with no
    grants with 200 and ``grantees: []`` (gonka-ai/gonka inference-chain/x/inference/keeper/
    query_grantees_by_message_type.go @ 312044d28c7170d7f08bf88e41427396f3b95817: it never answers NotFound),
    while a 404, even grpc-gateway's ``{"code":5,"message":"Not Found"}``, is a node or proxy without the route
    (grpc-ecosystem/grpc-gateway runtime/errors.go ``DefaultRoutingErrorHandler`` @
    6bd7daafc3c957cd2a16a770b37e39c8b72be3d4): a failed read, never "none granted". The REST gateway renders
    default values (cosmos/cosmos-sdk server/api/server.go ``gateway.JSONPb{EmitDefaults: true}`` @
    0544aadb288691eb030db136d845f81cf326bce6), so a real answer always carries ``grantees``, ``[]`` for none: a
    200 without it (``{}``, a proxy's own error object) is a failed read naming the URL, not an empty list."""
    path = f"/grantees_by_message_type/{quote(granter, safe='')}/{quote(WARM_KEY_MSG_TYPE, safe='')}"
    data, served, url = chain.get_at(path, height)
    listed = data.get("grantees") if isinstance(data, dict) else None
    if not isinstance(listed, list):
        raise FetchError(url, f"grantees_by_message_type answer has no grantees list: {str(data)[:200]!r}",
                         status=200, transient=True)
    return [g for g in listed if isinstance(g, dict)], served


def check_operator_key(op: Operator, chain: ChainRest) -> str:
    """Set and return ``op.peer_address`` (the address the key is known by) when the key belongs to ``op.address``
    or to one of its grantees; else raise :class:`OperatorConfigError` naming both addresses. Chain read failures
    propagate (FetchError): the check could not be made."""
    own = base64.b64encode(op.public_key).decode("ascii")
    key_address = op.key_address
    peer = None
    if key_address == op.address or account_public_key(chain, op.address) == own:
        peer = op.address
    else:
        for grantee in grantees(chain, op.address):
            listed = grantee.get("address")
            if isinstance(listed, str) and (listed == key_address or public_key_text(grantee.get("pub_key")) == own):
                peer = listed
                break
    if peer is None:
        raise OperatorConfigError(
            f"{ENV_KEY_FILE} holds the key of {key_address}, which is neither {ENV_ADDRESS} {op.address} nor a "
            f"grantee of it for {WARM_KEY_MSG_TYPE}: hosts would refuse every payload request it signs")
    if op.member != op.address and not any(g.get("address") == op.address for g in grantees(chain, op.member)):
        # hosts accept a warm address only for the member that granted it (findGranterInGroup, VerifyWarmKey)
        raise OperatorConfigError(f"{ENV_MEMBER} {op.member}: {ENV_ADDRESS} {op.address} is not a grantee of it "
                                  f"for {WARM_KEY_MSG_TYPE}, so hosts would not count it as that member")
    op.peer_address = peer
    return peer

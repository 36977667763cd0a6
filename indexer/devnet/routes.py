"""Request routing of the devnet: path + query → status, headers, body. No sockets here, so the
routing is testable without a server; :mod:`indexer.devnet.server` adds HTTP and faults.

URL layout (one listener for the whole network):
  ``/chain-api/productscience/inference/inference/…``  chain REST (grpc-gateway)
  ``/chain-rpc/…``                                      CometBFT RPC subset
  ``/hosts/<name>/devshard/…``                          each simulated devshard host; its participant's
                                                        ``inference_url`` is ``<base>/hosts/<name>``
  ``/devnet/…``                                         control (advance the clock, describe the network)
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping

from indexer.devnet import chainviews as cv
from indexer.devnet import epochviews as ev
from indexer.devnet import hostviews as hv
from indexer.devnet.chainroutes import CHAIN_PREFIX, ChainRoutes, Response, query_param
from indexer.devnet.operators import DevnetAccounts, authenticate
from indexer.devnet.peerrpc import RETIRED_MESSAGE, ConnectError, PeerRpc
from indexer.devnet.world import Devnet
from indexer.sources.gonka.signing import REFUSALS

__all__ = ["App", "AppOptions", "CHAIN_PREFIX", "Response"]


@dataclass
class AppOptions:
    b64_events: bool = False  # CometBFT < 0.37 base64-encodes event attributes
    escrow_max_model_len: str | None = None  # None | "string" | "number" (PR #1763 field)
    lying_host: str | None = None  # address of the host that serves a diverging diff log
    serve_upto: int | None = None  # hosts serve no diff beyond this nonce (stuck logs)
    payload_auth: bool = False  # payload route authenticates like real hosts (operator mode); off: any
                                # X-Validator-Address header is enough (the unsigned flows of tests and the demo)
    state_retain_blocks: int | None = None  # chain state kept for heights this far below the tip (None: one epoch)
    missing_epochs: tuple[int, ...] = ()  # epoch_group_data/<E> of these epochs answers 404 (a node missing them)
    failing_models: tuple[str, ...] = ()  # epoch_group_data?model_id=… of these models answers 500 (a failed read)
    unindexed_settlements: tuple[str, ...] = ()  # escrows whose settlement tx_search does not find (a node whose tx
                                                 # index lags the state it serves)
    failing_settlement_searches: tuple[str, ...] = ()  # a search for one of these escrows' settlement answers 500
    missing_settlement_txs: tuple[str, ...] = ()  # RPC tx and GetTx of these escrows' settlement answer not found (a
                                                  # node that pruned, or has not yet indexed, the block)
    failing_rpc_txs: tuple[str, ...] = ()  # RPC tx of these escrows' settlement answers 500 (GetTx still serves it)
    pruned_rpc_txs: tuple[str, ...] = ()  # RPC tx of these escrows' settlement answers not found (GetTx serves it),
                                          # and /status puts the node's earliest block past their settlements
    lagging_rpc_txs: tuple[str, ...] = ()  # RPC tx of these escrows' settlement answers not found though the node
                                           # keeps the block (a tx index that lags): GetTx serves it
    host_versions: tuple[str, ...] = ()  # what /devshard/healthz lists (hosts run every approved version side by
                                         # side); () = the scenario's version only
    rpc_hosts: tuple[str, ...] = ()  # "new" hosts: the HTTP payload route answers 410 http_session_retired and
                                     # payloads are served over Connect RPC (indexer.devnet.peerrpc)
    retired_hosts: tuple[str, ...] = ()  # hosts whose HTTP payload route answers that 410 but that serve no Connect
    refusing_attach_hosts: tuple[str, ...] = ()  # new hosts that refuse every Attach (403 permission_denied)
    rpc_session_seconds: float = 300.0  # lifetime of an Attach session token (upstream defaultSessionTTL)
    lying_kind: str = "altered"  # how the lying host lies (indexer.devnet.sealing.fork)
    # host address → the status its payload route answers every request with (404: not stored, 403: refused, …);
    # changed by tests between cycles, like Faults.down_hosts
    payload_statuses: dict[str, int] = field(default_factory=dict)
    # host address → a made-up stored body it serves as every payload it is asked for, in the right shape (a member
    # lying about a refusal: its bytes do not hash to the Finish's response_hash); changed by tests between cycles
    payload_liars: dict[str, str] = field(default_factory=dict)


Handler = Callable[..., Response]


class App(ChainRoutes):
    def __init__(self, net: Devnet, options: AppOptions | None = None) -> None:
        self.net = net
        self.options = options or AppOptions()
        self.accounts = DevnetAccounts(net.scenario.keys, [h.address for h in net.scenario.hosts])
        self.peer_rpc = PeerRpc(self.accounts, self.options.rpc_session_seconds)
        self._with_body = {self.rpc_attach, self.rpc_get_payload}
        self.payload_requests: Counter = Counter()  # (host address, escrow, inference_id) → HTTP payload requests
        self.base_url = ""
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        for method, pattern, handler in self._table():
            self._routes.append((method, re.compile(f"^{pattern}$"), handler))

    def host_url(self, address: str) -> str:
        return f"{self.base_url}/hosts/{self.net.scenario.hosts_by_address[address].name}"

    def _table(self) -> list[tuple[str, str, Handler]]:
        c, h = CHAIN_PREFIX, r"/hosts/(?P<host>[^/]+)"
        V = r"v\d+(?:\.\d+)*"  # a protocol version in a host route: v5, v4.1, v5.0.2
        return [
            ("POST", "/devnet/advance", self.advance),
            ("GET", "/devnet/state", self.describe),
            ("GET", f"{c}/get_current_epoch", lambda q, hd: Response.json(cv.current_epoch_json(self.net))),
            ("GET", f"{c}/epoch_info", lambda q, hd: Response.json(ev.epoch_info_json(self.net))),
            ("GET", f"{c}/params", self.params),
            ("GET", f"{c}/epoch_group_data/(?P<epoch>[^/]+)", self.epoch_group_data),
            ("GET", f"{c}/epoch_performance_summary/(?P<epoch>[^/]+)/(?P<participant>[^/]+)",
             self.performance_summary),
            ("GET", f"{c}/excluded_participants/(?P<epoch>[^/]+)", self.excluded_participants),
            ("GET", f"{c}/devshard_escrow/(?P<escrow>[^/]+)", self.escrow),
            ("GET", f"{c}/devshard_host_epoch_stats/(?P<epoch>[^/]+)/(?P<participant>[^/]+)", self.host_epoch_stats),
            ("GET", f"{c}/participant/(?P<address>[^/]+)", self.participant),
            ("GET", f"{c}/grantees_by_message_type/(?P<granter>[^/]+)/(?P<msg_type>.+)", self.grantees),
            ("GET", f"{c.rsplit('/productscience', 1)[0]}/cosmos/auth/v1beta1/accounts/(?P<address>[^/]+)",
             self.account),
            # x/upgrade: the devnet chain has applied no upgrade plan (height "0", as cosmos-sdk answers then)
            ("GET", f"{c.rsplit('/productscience', 1)[0]}/cosmos/upgrade/v1beta1/applied_plan/(?P<name>[^/]+)",
             lambda q, hd, name: Response.json({"height": "0"})),
            ("GET", f"{c.rsplit('/productscience', 1)[0]}/cosmos/tx/v1beta1/txs/(?P<tx_hash>[^/]+)", self.get_tx),
            ("GET", "/chain-rpc/status", self.rpc_status),
            ("GET", "/chain-rpc/tx_search", self.tx_search),
            ("GET", "/chain-rpc/tx", self.rpc_tx),
            ("GET", f"{h}/devshard/healthz", self.healthz),
            ("GET", f"{h}/devshard/stats/shards", self.shards_newest),
            ("GET", f"{h}/devshard/(?P<version>{V})/stats/shards", self.shards),
            ("GET", f"{h}/devshard/(?P<version>{V})/stats/shards/(?P<escrow>[^/]+)", self.shard_detail),
            ("GET", f"{h}/devshard/(?P<version>{V})/sessions/(?P<escrow>[^/]+)/diffs", self.diffs),
            ("GET", f"{h}/devshard/(?P<version>{V})/sessions/(?P<escrow>[^/]+)/signatures", self.signatures),
            ("GET", f"{h}/devshard/(?P<version>{V})/sessions/(?P<escrow>[^/]+)/payloads", self.payloads),
            ("POST", f"{h}/devshard/(?P<version>{V})/sessions/(?P<escrow>[^/]+)/rpc"
                     r"/devshard\.transport\.v1\.PeerAuthService/Attach", self.rpc_attach),
            ("POST", f"{h}/devshard/(?P<version>{V})/sessions/(?P<escrow>[^/]+)/rpc"
                     r"/devshard\.transport\.v1\.PayloadService/GetPayload", self.rpc_get_payload),
            ("GET", f"{h}/v1/devshard/.*", self.gone),
        ]

    def handle(self, method: str, path: str, query: Mapping[str, list[str]], headers: Mapping[str, str],
               body: bytes = b"") -> Response:
        wrong_method = False
        for route_method, pattern, handler in self._routes:
            m = pattern.match(path)
            if m and route_method == method:
                with self.net.lock:  # the clock may advance concurrently (POST /devnet/advance)
                    if path.startswith(CHAIN_PREFIX):
                        refused = self._height_refused(headers)
                        if refused is not None:
                            return refused
                    if handler in self._with_body:
                        return handler(query, headers, body=body, **m.groupdict())
                    return self._served_height(path, headers, handler(query, headers, **m.groupdict()))
            wrong_method = wrong_method or m is not None
        return Response.text("method not allowed", 405) if wrong_method else Response.text("404 page not found", 404)

    # -- control ----------------------------------------------------------------------------------
    def advance(self, q: Mapping, hd: Mapping) -> Response:
        return Response.json({"epoch": str(self.net.advance_epoch())})

    def describe(self, q: Mapping, hd: Mapping) -> Response:
        return Response.json({"current_epoch": self.net.current_epoch,
                              "chain_rest_url": f"{self.base_url}/chain-api", "rpc_url": f"{self.base_url}/chain-rpc",
                              "hosts": {h.address: self.host_url(h.address) for h in self.net.scenario.hosts},
                              "last_epoch": self.net.scenario.epochs[-1].epoch_index,
                              "escrows": len(self.net.scenario.escrows),
                              "diffs": sum(len(e.diffs) for e in self.net.scenario.escrows.values()),
                              "txs": sum(len(d["txs"]) for e in self.net.scenario.escrows.values()
                                         for d in e.diffs)})

    # -- devshard hosts ---------------------------------------------------------------------------
    def _host(self, name: str):
        return next((h for h in self.net.scenario.hosts if h.name == name), None)

    def healthz(self, q: Mapping, hd: Mapping, host: str) -> Response:
        if self._host(host) is None:
            return Response.text("404 page not found", 404)
        return Response.json(hv.healthz_json(self._host_versions()))

    def shards_newest(self, q: Mapping, hd: Mapping, host: str) -> Response:
        return self.shards(q, hd, host, self.net.scenario.config.protocol_version)

    def shards(self, q: Mapping, hd: Mapping, host: str, version: str) -> Response:
        spec = self._host(host)
        if spec is None:
            return Response.text("404 page not found", 404)
        return Response.json(hv.shards_json(self.net, spec, version))

    def _host_versions(self) -> tuple[str, ...]:
        """The protocol versions every host runs: options.host_versions, else the scenario's one."""
        return self.options.host_versions or (self.net.scenario.config.protocol_version,)

    def _session(self, host: str, version: str, escrow: str, observability: bool = False):
        """(host spec, session). Observability routes (stats/shards/{id}, sessions/{id}/diffs|signatures) are
        versionless on real hosts: a versioned URL of them is rewritten to the versionless form and answered by the
        child the session is bound to (devshard IsVersionlessObsPath), so any version the host runs will do there;
        the protocol routes (payloads) answer only under the session's own version."""
        spec = self._host(host)
        if spec is None:
            return spec, None
        if observability:
            return spec, (hv.session(self.net, spec, escrow, None) if version in self._host_versions() else None)
        return spec, hv.session(self.net, spec, escrow, version)

    def shard_detail(self, q: Mapping, hd: Mapping, host: str, version: str, escrow: str) -> Response:
        _, esc = self._session(host, version, escrow, observability=True)
        return Response.json(hv.shard_detail_json(self.net, esc)) if esc else Response.text("shard not found", 404)

    def diffs(self, q: Mapping, hd: Mapping, host: str, version: str, escrow: str) -> Response:
        spec, esc = self._session(host, version, escrow, observability=True)
        if esc is None:
            return Response.text("session not found", 404)
        try:
            first = int(query_param(q, "from") or "")
            last = int(query_param(q, "to") or first + hv.MAX_DIFFS_PER_PAGE - 1)
        except ValueError:
            return Response.text("invalid from/to", 400)
        if first < 0 or last < first:
            return Response.text("invalid diff range", 400)
        if last - first + 1 > hv.MAX_DIFFS_PER_PAGE:
            return Response.text(f"diff range exceeds one page (max {hv.MAX_DIFFS_PER_PAGE} nonces or 8 MiB)", 400)
        lying = self.options.lying_kind if spec.address == self.options.lying_host else False
        if self.options.serve_upto is not None:
            last = min(last, self.options.serve_upto)
        return Response.raw_json(hv.diffs_body(self.net, esc, first, last, lying))

    def signatures(self, q: Mapping, hd: Mapping, host: str, version: str, escrow: str) -> Response:
        _, esc = self._session(host, version, escrow, observability=True)
        nonce = query_param(q, "nonce") or ""
        body = hv.signatures_json(self.net, esc, int(nonce)) if esc and nonce.isdigit() else None
        return Response.json(body) if body else Response.text("signatures not found", 404)

    def payloads(self, q: Mapping, hd: Mapping, host: str, version: str, escrow: str) -> Response:
        spec = self._host(host)
        if spec is not None:
            self.payload_requests[(spec.address, escrow, query_param(q, "inference_id") or "")] += 1
            status = self.options.payload_statuses.get(spec.address)
            if status:
                return Response.json({"message": f"simulated payload answer {status}"}, status)
            lie = self.options.payload_liars.get(spec.address)
            if lie is not None:
                return Response.json(hv.made_up_payload_json(query_param(q, "inference_id") or "", lie))
        if spec is not None and spec.address in self.options.rpc_hosts + self.options.retired_hosts:
            # transport/httperror.go @621c4a3743cc: DevshardErrorHTTPSessionRetired, HTTPSessionRetiredMessage
            resp = Response.json({"message": RETIRED_MESSAGE}, 410)
            resp.headers["X-Devshard-Error"] = "http_session_retired"
            return resp
        if self.options.payload_auth:
            return self.authenticated_payloads(q, hd, host, version, escrow)
        # lax mode: real hosts check group membership and a signed timestamp; here only the header is wanted
        if not {k.lower() for k in hd} & {"x-validator-address"}:
            return Response.text("missing validator authentication", 401)
        _, esc = self._session(host, version, escrow)
        iid = query_param(q, "inference_id") or ""
        body = hv.payload_body(self.net, esc, int(iid)) if esc and iid.isdigit() else None
        return Response.raw_json(body) if body else Response.text("payload not found", 404)

    def authenticated_payloads(self, q: Mapping, hd: Mapping, host: str, version: str, escrow: str) -> Response:
        """``HandlePayloads``: inference_id, then ``authenticatePayloadRequest`` against the session's group."""
        _, esc = self._session(host, version, escrow)
        if esc is None:
            return Response.text("session not found", 404)
        iid = query_param(q, "inference_id") or ""
        refusal = "missing_inference_id" if iid == "" else authenticate(hd, iid, esc.slots, self.accounts)
        if refusal is None:
            if not iid.isdigit():
                return Response.json({"message": f"invalid inference_id {iid!r}"}, 500)
            body = hv.payload_body(self.net, esc, int(iid))
            if body is not None:
                return Response.raw_json(body)
            refusal = "payload_not_found"
        status, message = REFUSALS[refusal]
        return Response.json({"message": message}, status)  # echo's rendering of echo.NewHTTPError

    # -- Connect RPC of new hosts (indexer.devnet.peerrpc) ----------------------------------------------------
    def _rpc(self, host: str, version: str, escrow: str, hd: Mapping, call) -> Response:
        spec, esc = self._session(host, version, escrow)
        if spec is None or spec.address not in self.options.rpc_hosts:
            return Response.text("404 page not found", 404)
        content_type = next((v for k, v in hd.items() if k.lower() == "content-type"), "")
        if content_type.split(";")[0].strip() != "application/json":
            resp = Response(415, b"", {"Accept-Post": "application/json"})  # the devnet speaks the JSON codec only
            return resp
        try:
            if esc is None:
                raise ConnectError("not_found", "session not found")
            status, body, headers = 200, hv.compact_json(call(spec, esc)), {"Content-Type": "application/json"}
        except ConnectError as exc:
            status, body, headers = exc.answer()
        return Response(status, body, headers)

    def rpc_attach(self, q: Mapping, hd: Mapping, host: str, version: str, escrow: str, body: bytes) -> Response:
        def attach(spec, esc):
            if spec.address in self.options.refusing_attach_hosts:
                raise ConnectError("permission_denied", "simulated refusal of every Attach")
            return self.peer_rpc.attach(spec.address, esc.slots, body)
        return self._rpc(host, version, escrow, hd, attach)

    def rpc_get_payload(self, q: Mapping, hd: Mapping, host: str, version: str, escrow: str,
                        body: bytes) -> Response:
        return self._rpc(host, version, escrow, hd, lambda spec, esc: self.peer_rpc.get_payload(
            spec.address, esc.slots, hd, body, lambda iid: hv.payload_json(esc, iid)))

    def gone(self, q: Mapping, hd: Mapping, host: str) -> Response:
        version = self.net.scenario.config.protocol_version
        resp = Response.text("devshard API moved to /devshard/{version}", 410)
        resp.headers.update({"Deprecation": "true", "Link": f'</devshard/{version}>; rel="successor-version"'})
        return resp

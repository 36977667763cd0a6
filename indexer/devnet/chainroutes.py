"""The devnet's chain routes: cosmos-sdk REST (grpc-gateway) under ``/chain-api`` and the CometBFT RPC subset under
``/chain-rpc``, as the :class:`ChainRoutes` handlers :class:`indexer.devnet.routes.App` routes to; with the response
type every devnet route answers with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import unquote

from indexer.devnet import chainviews as cv
from indexer.devnet import epochviews as ev
from indexer.devnet import hostviews as hv
from indexer.devnet.operators import account_json

CHAIN_PREFIX = "/chain-api/productscience/inference/inference"
HEIGHT_HEADER = "x-cosmos-block-height"


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, obj: Any, status: int = 200) -> "Response":
        return cls.raw_json(hv.compact_json(obj), status)

    @classmethod
    def raw_json(cls, body: bytes, status: int = 200) -> "Response":
        """Already-encoded JSON (precomputed bodies)."""
        return cls(status, body, {"Content-Type": "application/json"})

    @classmethod
    def text(cls, message: str, status: int) -> "Response":
        # Go's http.Error: text/plain with a trailing newline
        return cls(status, (message + "\n").encode(), {"Content-Type": "text/plain; charset=utf-8"})


def grpc_error(code: int, message: str) -> Response:
    http = {3: 400, 5: 404}.get(code, 500)
    return Response.json({"code": code, "message": message, "details": []}, http)


class ChainRoutes:
    """Handlers of the chain REST and RPC routes. The host class provides ``net`` (the Devnet), ``options`` (its
    AppOptions), ``accounts`` and ``host_url``."""

    # -- chain REST
    def _height(self, hd: Mapping[str, str]) -> int | None:
        value = next((v for k, v in hd.items() if k.lower() == HEIGHT_HEADER), None)
        return int(value) if value is not None and value.strip().isdigit() else None

    def _height_refused(self, hd: Mapping[str, str]) -> Response | None:
        """cosmos-sdk ``CreateQueryContext`` for a query with ``x-cosmos-block-height``: a future height is
        ErrInvalidHeight (gRPC InvalidArgument, 400), a height whose state was pruned is ErrNotFound wrapped
        (registered without a gRPC code: Unknown, 500 through the gateway). The devnet keeps the state of the
        last ``options.state_retain_blocks`` blocks (default: one epoch's worth)."""
        height = self._height(hd)
        if height is None or height == 0:
            return None
        latest = self.net.latest_height()
        if height > latest:
            return grpc_error(3, "cannot query with height in the future; please provide a valid height: "
                                 "invalid height")
        retain = self.options.state_retain_blocks
        if retain is None:
            retain = self.net.scenario.config.blocks_per_epoch
        if height < latest - retain:
            return grpc_error(2, f"failed to load state at height {height}; version does not exist "
                                 f"(latest height: {latest}): not found")
        return None

    def _served_height(self, path: str, hd: Mapping[str, str], resp: Response) -> Response:
        """cosmos-sdk sets ``x-cosmos-block-height`` on every gRPC query answer, the height asked for or the
        latest (baseapp/grpcserver.go ``RegisterGRPCServer`` @ 118db410c1d5a319a3799a763e1153efc8cbbaab), and the
        gateway forwards it as ``Grpc-Metadata-X-Cosmos-Block-Height``: every chain REST answer carries it."""
        if not path.startswith("/chain-api/"):
            return resp
        served = str(self._height(hd) or self.net.latest_height())
        return Response(resp.status, resp.body, {**resp.headers, "Grpc-Metadata-X-Cosmos-Block-Height": served})

    def params(self, q: Mapping, hd: Mapping) -> Response:
        return Response.json(ev.params_json(self.net, self._height(hd) or self.net.latest_height()))

    def performance_summary(self, q: Mapping, hd: Mapping, epoch: str, participant: str) -> Response:
        if not epoch.isdigit():
            return grpc_error(3, f"invalid epoch {epoch!r}")
        body = ev.performance_summary_json(self.net, int(epoch), participant)
        return Response.json(body) if body else grpc_error(5, "not found")

    def excluded_participants(self, q: Mapping, hd: Mapping, epoch: str) -> Response:
        if not epoch.isdigit():
            return grpc_error(3, f"invalid epoch {epoch!r}")
        return Response.json(ev.excluded_participants_json(self.net, int(epoch)))

    def epoch_group_data(self, q: Mapping, hd: Mapping, epoch: str) -> Response:
        if not epoch.isdigit():
            return grpc_error(3, f"invalid epoch {epoch!r}")
        if int(epoch) in self.options.missing_epochs:
            return grpc_error(5, "epoch group data not found")
        if query_param(q, "model_id") in self.options.failing_models:
            return grpc_error(13, "simulated failure of a model group read")
        body = ev.epoch_group_data_json(self.net, int(epoch), query_param(q, "model_id"))
        return Response.json(body) if body else grpc_error(5, "epoch group data not found")

    def escrow(self, q: Mapping, hd: Mapping, escrow: str) -> Response:
        if not escrow.isdigit():
            return grpc_error(3, f"invalid escrow id {escrow!r}")
        esc = self.net.escrow(escrow)
        if esc is None:
            return Response.json({"found": False})
        return Response.json(cv.escrow_json(self.net, esc, self.options.escrow_max_model_len))

    def host_epoch_stats(self, q: Mapping, hd: Mapping, epoch: str, participant: str) -> Response:
        if not epoch.isdigit():
            return grpc_error(3, f"invalid epoch {epoch!r}")
        return Response.json(cv.host_epoch_stats_json(self.net, int(epoch), participant))

    def participant(self, q: Mapping, hd: Mapping, address: str) -> Response:
        if address not in self.net.scenario.hosts_by_address:
            return grpc_error(5, "participant not found")
        return Response.json(cv.participant_json(self.net, address, self.host_url(address)))

    def get_tx(self, q: Mapping, hd: Mapping, tx_hash: str) -> Response:
        """cosmos-sdk ``GetTx``: the decoded transaction and its response (gRPC NotFound for an unknown hash)."""
        body = None if self._missing_settlement(tx_hash) else cv.get_tx_json(self.net, tx_hash)
        return Response.json(body) if body else grpc_error(5, f"tx not found: {tx_hash}")

    def _txs_by_hash(self) -> dict[str, tuple[str | None, dict]]:
        """hash → (the escrow a settlement settles, else None; the tx as tx_search lists it), built once per clock
        and options (a lookup by hash scanned every tx, ~50 ms a request at the benchmark's size)."""
        unindexed = frozenset(self.options.unindexed_settlements)
        key = (self.net.current_epoch, self.options.b64_events, unindexed)
        with self.net.lock:
            if getattr(self, "_tx_index_key", None) != key:
                self._tx_index = {tx["hash"]: ((events.get("devshard_escrow_settled") or {}).get("escrow_id"), tx)
                                  for events, tx in cv.all_txs(self.net, self.options.b64_events, unindexed)}
                self._tx_index_key = key
            return self._tx_index

    def _missing_settlement(self, tx_hash: str, escrows: tuple[str, ...] | None = None) -> bool:
        """Whether ``tx_hash`` is the settlement of an escrow in ``escrows`` (default ``missing_settlement_txs``)."""
        settles = self._txs_by_hash().get(tx_hash.upper(), (None, None))[0]
        return settles is not None and settles in (self.options.missing_settlement_txs if escrows is None else escrows)

    def rpc_tx(self, q: Mapping, hd: Mapping) -> Response:
        """CometBFT ``tx?hash=0x…``: the result as tx_search lists it, the raw transaction base64-encoded."""
        wanted = (query_param(q, "hash") or "").strip('"').removeprefix("0x").upper()
        if self._missing_settlement(wanted, self.options.failing_rpc_txs):
            return Response.json({"jsonrpc": "2.0", "id": -1, "error": {
                "code": -32603, "message": "Internal error", "data": "simulated failure of a tx read"}}, 500)
        missing = (self._missing_settlement(wanted) or self._missing_settlement(wanted, self.options.pruned_rpc_txs)
                   or self._missing_settlement(wanted, self.options.lagging_rpc_txs))
        found = None if missing else self._txs_by_hash().get(wanted, (None, None))[1]
        if found is None:
            return Response.json({"jsonrpc": "2.0", "id": -1, "error": {
                "code": -32603, "message": "Internal error", "data": f"tx ({wanted}) not found"}}, 500)
        return Response.json({"jsonrpc": "2.0", "id": -1, "result": found})

    def rpc_status(self, q: Mapping, hd: Mapping) -> Response:
        """CometBFT ``status``; the earliest block the node keeps is past the settlements of ``pruned_rpc_txs``."""
        pruned = [self.net.settle_height(e) for e in map(self.net.escrow, self.options.pruned_rpc_txs) if e]
        return Response.json(cv.status_json(self.net, max(pruned, default=0) + 1))

    def grantees(self, q: Mapping, hd: Mapping, granter: str, msg_type: str) -> Response:
        """``GranteesByMessageType``: a host's warm key is granted ``MsgStartInference`` (what devshard signers and the
        settlement accept); other message types and other accounts have no grantees."""
        msg_type = unquote(msg_type)
        if not msg_type.startswith("/"):
            msg_type = "/" + msg_type  # a client that did not escape the leading slash of the type URL
        return Response.json(cv.grantees_json(self.net, granter, msg_type))

    def tx_search(self, q: Mapping, hd: Mapping) -> Response:
        try:
            page = int((query_param(q, "page") or "1").strip('"'))
            per_page = int((query_param(q, "per_page") or "30").strip('"'))
        except ValueError:
            return Response.json({"jsonrpc": "2.0", "id": -1, "error": {"code": -32602, "message": "Invalid params"}}, 500)
        query = query_param(q, "query") or ""
        one = re.search(r"devshard_escrow_settled\.escrow_id\s*=\s*'(\d+)'", query)
        if one and one.group(1) in self.options.failing_settlement_searches:
            return Response.json({"jsonrpc": "2.0", "id": -1, "error": {
                "code": -32603, "message": "Internal error", "data": "simulated failure of a settlement search"}}, 500)
        status, body = cv.tx_search_json(self.net, query, page, per_page, query_param(q, "order_by") or "asc",
                                         self.options.b64_events, frozenset(self.options.unindexed_settlements))
        if status == 200 and "devshard_escrow_settled.escrow_id EXISTS" in query \
                and page * max(1, min(per_page, 100)) >= int(body["result"]["total_count"]):
            self.net.settlement_search_answered()
        return Response.json(body, status)

    # -- keys on the chain: accounts and warm keys (operator mode's start-up check) ----------------------------
    def account(self, q: Mapping, hd: Mapping, address: str) -> Response:
        found = account_json(self.accounts, unquote(address))
        return Response.json(found) if found else grpc_error(5, f"account {unquote(address)} not found")


def query_param(q: Mapping[str, list[str]], name: str) -> str | None:
    values = q.get(name)
    return values[0] if values else None

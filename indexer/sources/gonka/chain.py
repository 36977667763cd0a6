"""Chain REST (grpc-gateway) client: ``<GONKA_CHAIN_REST_URL>/productscience/inference/inference/…`` (§5.1).

Reads at a past height send ``x-cosmos-block-height`` (cosmos-sdk's gRPC height header; the gateway forwards it and
answers with the height it served in ``Grpc-Metadata-X-Cosmos-Block-Height``). A node that no longer keeps the
state of that height answers an error whose message is ``failed to load state at height H; … (latest height: L)``
(cosmos-sdk baseapp ``CreateQueryContext``; ``ErrNotFound`` since v0.50, so HTTP 500 through the gateway,
``ErrInvalidRequest`` / 400 before): the next node is asked (an archive node keeps what a pruning node dropped),
and :meth:`ChainRest.params` raises :class:`HeightPruned` once no node serves the height.
"""
from __future__ import annotations

import re
import threading
from typing import Any, Mapping
from urllib.parse import quote

from indexer.sources.gonka.http import Fetcher, FetchError

PREFIX = "/productscience/inference/inference"
HEIGHT_HEADER = "x-cosmos-block-height"
_PRUNED = re.compile(rb"failed to load state at height \d+")


class HeightPruned(FetchError):
    """No node served the state of the requested height, and one at least said it does not keep it. ``failed``:
    a node's other failure (down, 5xx) on the way, when there was one: that node may still serve the height (an
    archive node), so what stands in for it now is to be read again."""

    def __init__(self, err: FetchError, height: int, failed: FetchError | None = None) -> None:
        super().__init__(err.url, str(err).rsplit(" (", 1)[0], status=err.status, transient=False)
        self.height = height
        self.failed = failed


def _pruned_answer(status: int, body: bytes) -> bool:
    return status != 200 and _PRUNED.search(body) is not None


def _not_found(status: int, body: bytes) -> bool:
    return status == 404 or (status != 200 and b"not found" in body)


_ERROR_KEYS = frozenset({"code", "message", "error", "details", "trailer"})


def gateway_error(data: Any) -> str | None:
    """Why a chain REST answer is a gRPC-gateway error body rather than data, or None. The gateway writes a failed
    query as ``{"code": <gRPC code>, "message": …, "details": […]}`` (grpc-ecosystem/grpc-gateway runtime/errors.go
    @ 6bd7daafc3c957cd2a16a770b37e39c8b72be3d4; ``{"error": …, "code": …}`` in older gateways, @
    07b73580b8c458b36b3695d2d5af189257032370) with the HTTP status of the code, but a proxy in front of a node may
    answer it with 200; no inference query response has only these keys, so such a body is an error whatever its
    status (a read of it as data would take a missing list for an empty one)."""
    if not isinstance(data, dict) or not data or not set(data) <= _ERROR_KEYS:
        return None
    code = data.get("code")
    said = data.get("message") or data.get("error")
    if isinstance(code, bool) or not isinstance(code, int) or code == 0 or not isinstance(said, str):
        return None
    return f"gRPC code {code}: {' '.join(said.split())[:300]}"


def served_height(headers: Mapping[str, str]) -> int | None:
    """The height a response was served at (gateway metadata header, or the plain gRPC header)."""
    for key in ("Grpc-Metadata-X-Cosmos-Block-Height", HEIGHT_HEADER):
        value = headers.get(key)
        if value is not None and str(value).isascii() and str(value).isdigit():
            return int(value)
    return None


class ChainRest:
    def __init__(self, fetcher: Fetcher) -> None:
        self.http = fetcher
        if fetcher.error_body is None:
            fetcher.error_body = gateway_error
        # (node, height, named a height): answers as of another height already recorded; a client lives one poll
        # cycle, so a node that ignores the height header is recorded once a cycle and height, not once a read
        self._unserved: set[tuple[str, int, bool]] = set()
        self._lock = threading.Lock()

    def _first_unserved(self, base: str, height: int, named: bool) -> bool:
        with self._lock:
            if (base, height, named) in self._unserved:
                return False
            self._unserved.add((base, height, named))
            return True

    def _get(self, path: str, params: dict | None = None) -> Any:
        return self.http.get_json(PREFIX + path, params)

    def _get_at(self, path: str, height: int | None) -> tuple[Any, int | None, str]:
        """(JSON, the height it was served at, the URL that answered) of a read as of ``height`` (None: the latest
        state)."""
        if height is None:
            data, resp_headers, base = self.http.get_json_meta_from(PREFIX + path)
            return data, served_height(resp_headers), base + PREFIX + path
        data, base = self._read_at(PREFIX + path, int(height))
        return data, int(height), base + PREFIX + path

    def _read_at(self, path: str, height: int) -> tuple[Any, str]:
        """The JSON of ``path`` as of ``height`` from the first node that serves that height, each node asked in
        turn: one that has pruned it (a pruning node before an archive node) or that answers as of another height
        is passed over. The served height is the one the answer says: cosmos-sdk sets ``x-cosmos-block-height`` on
        every gRPC query answer, the height it was asked for or the latest (cosmos/cosmos-sdk
        baseapp/grpcserver.go ``RegisterGRPCServer`` @ 118db410c1d5a319a3799a763e1153efc8cbbaab), and the gateway
        forwards it as ``Grpc-Metadata-X-Cosmos-Block-Height``; an answer that names another height, or none (a
        proxy that dropped the header, or ignored the request's), cannot be taken as that height's state, and the
        node is recorded as failing (once a client, node and height: every read of a cycle would say the same).
        Raises :class:`HeightPruned` when no node serves the height and one at
        least said it does not (pruned, or answered as of another height): live values then stand in, marked
        inexact; when another node failed otherwise (down, 5xx) the error carries that failure (``failed``), so the
        caller keeps the read open and a later capture replaces the stand-in once that node serves the height. When
        every node failed otherwise, the failure (transient first). Returns (JSON, base URL of the node)."""
        http = self.http
        unserved: list[FetchError] = []
        failed: FetchError | None = None
        for base in http.urls():
            try:
                data, resp_headers = http.get_json_meta_at(base, path, None, {HEIGHT_HEADER: str(height)},
                                                           permanent=_pruned_answer)
            except FetchError as exc:
                if exc.expected:  # pruned there: another node may keep the height
                    unserved.append(exc)
                elif failed is None or exc.transient:
                    failed = exc  # reported by the Fetcher
                continue
            served = served_height(resp_headers)
            if served != height:
                said = "names no served height" if served is None else f"was served at height {served}"
                err = FetchError(base + path, f"asked as of height {height}, the answer {said}: not taken as the "
                                 "state of that height", transient=False)
                if self._first_unserved(base, height, served is not None):
                    http.distrust(base, err)
                else:
                    http.demote(base)
                unserved.append(err)
                continue
            http.prefer(base)
            return data, base
        if not unserved:
            assert failed is not None
            raise failed
        last = unserved[-1]
        raise HeightPruned(FetchError(last.url, "; ".join(str(e) for e in unserved), status=last.status,
                                      transient=False), height, failed)

    def get_at(self, path: str, height: int | None) -> tuple[Any, int | None, str]:
        """A read under the module prefix as of ``height`` (None: live) → (JSON, height served, the URL that
        answered); raises :class:`HeightPruned` when no node serves that height (pruned, or answered as of
        another)."""
        return self._get_at(path, height)

    def current_epoch(self) -> dict:
        return self._get("/get_current_epoch")

    def epoch_info(self) -> dict:
        """``QueryEpochInfoResponse {block_height, params (the whole module Params), latest_epoch}``."""
        return self._get("/epoch_info")

    def epoch_info_from(self) -> tuple[dict, str]:
        """:meth:`epoch_info` and the base URL of the node that answered it (a caller that judges the answer)."""
        return self.http.get_json_from(PREFIX + "/epoch_info")

    def applied_plan(self, name: str) -> dict:
        """cosmos-sdk x/upgrade ``QueryAppliedPlanRequest``: ``{"height": "<block the plan was applied at>"}``,
        "0" while the plan has not been applied."""
        return self.http.get_json(f"/cosmos/upgrade/v1beta1/applied_plan/{quote(name, safe='')}")

    def epoch_group_data(self, epoch: int, model_id: str | None = None) -> dict:
        return self._get(f"/epoch_group_data/{int(epoch)}", {"model_id": model_id} if model_id else None)

    def params(self, height: int | None = None) -> tuple[dict, int | None]:
        """Module params as of ``height`` (None: live) → (``{"params": {…}}``, height served); raises
        :class:`HeightPruned` when no node serves that height."""
        data, served, _ = self._get_at("/params", height)
        return data, served

    def epoch_performance_summary(self, epoch: int, participant: str) -> dict:
        """``{"epochPerformanceSummary": {…}}`` (the proto field is camelCase, so the JSON key is too)."""
        return self._get(f"/epoch_performance_summary/{int(epoch)}/{quote(participant, safe='')}")

    def excluded_participants(self, epoch: int) -> dict:
        """``{"items": [{address, epoch_index, reason, exclusion_block_height}]}``."""
        return self._get(f"/excluded_participants/{int(epoch)}")

    def escrow_from(self, escrow_id: str | int) -> tuple[dict, str]:
        """``{"escrow":{…},"found":true}`` or ``{"found":false}`` (pruned or unknown), and the base URL of the node
        that answered it."""
        return self.http.get_json_from(PREFIX + f"/devshard_escrow/{int(escrow_id)}")

    def host_epoch_stats(self, epoch: int, participant: str) -> dict:
        return self._get(f"/devshard_host_epoch_stats/{int(epoch)}/{quote(participant, safe='')}")

    def tx(self, tx_hash: str) -> tuple[Any, str]:
        """cosmos-sdk ``GetTx`` (``/cosmos/tx/v1beta1/txs/{hash}``): ``{"tx": {"body": {"messages": [{"@type", …}]},
        …}, "tx_response": {"height", "txhash", "code", …}}``, the messages as JSON (a re-encoding, not the signed
        bytes), and the URL that answered. A 404 or a ``not found`` error is raised at once (retrying cannot bring
        the block back)."""
        path = f"/cosmos/tx/v1beta1/txs/{quote(tx_hash.upper(), safe='')}"
        data, base = self.http.get_json_from(path, permanent=_not_found)
        return data, base + path

    def participant(self, address: str) -> dict:
        return self._get(f"/participant/{quote(address, safe='')}")

"""Chain REST (grpc-gateway) client: ``<GONKA_CHAIN_REST_URL>/productscience/inference/inference/…`` (§5.1).

Reads at a past height send ``x-cosmos-block-height`` (cosmos-sdk's gRPC height header; the gateway forwards it and
answers with the height it served in ``Grpc-Metadata-X-Cosmos-Block-Height``). A node that no longer keeps the
state of that height answers an error whose message is ``failed to load state at height H; … (latest height: L)``
(cosmos-sdk baseapp ``CreateQueryContext``; ``ErrNotFound`` since v0.50, so HTTP 500 through the gateway,
``ErrInvalidRequest`` / 400 before): :meth:`ChainRest.params` raises :class:`HeightPruned` for it at once.
"""
from __future__ import annotations

import re
from typing import Any, Mapping
from urllib.parse import quote

from indexer.sources.gonka.http import Fetcher, FetchError

PREFIX = "/productscience/inference/inference"
HEIGHT_HEADER = "x-cosmos-block-height"
_PRUNED = re.compile(rb"failed to load state at height \d+")


class HeightPruned(FetchError):
    """The node has pruned the state of the requested height."""

    def __init__(self, err: FetchError, height: int) -> None:
        super().__init__(err.url, str(err).rsplit(" (", 1)[0], status=err.status, transient=False)
        self.height = height


def _pruned_answer(status: int, body: bytes) -> bool:
    return status != 200 and _PRUNED.search(body) is not None


def _not_found(status: int, body: bytes) -> bool:
    return status == 404 or (status != 200 and b"not found" in body)


def served_height(headers: Mapping[str, str]) -> int | None:
    """The height a response was served at (gateway metadata header, or the plain gRPC header)."""
    for key in ("Grpc-Metadata-X-Cosmos-Block-Height", HEIGHT_HEADER):
        value = headers.get(key)
        if value is not None and str(value).isdigit():
            return int(value)
    return None


class ChainRest:
    def __init__(self, fetcher: Fetcher) -> None:
        self.http = fetcher

    def _get(self, path: str, params: dict | None = None) -> Any:
        return self.http.get_json(PREFIX + path, params)

    def _get_at(self, path: str, height: int | None) -> tuple[Any, int | None]:
        """(JSON, the height it was served at) of a read as of ``height`` (None: the latest state)."""
        headers = {HEIGHT_HEADER: str(int(height))} if height is not None else None
        try:
            data, resp_headers = self.http.get_json_meta(PREFIX + path, None, headers, permanent=_pruned_answer)
        except FetchError as exc:
            if height is not None and not exc.transient and "failed to load state at height" in str(exc):
                raise HeightPruned(exc, height) from exc
            raise
        return data, served_height(resp_headers) if height is None else height

    def get_at(self, path: str, height: int | None) -> tuple[Any, int | None]:
        """A read under the module prefix as of ``height`` (None: live) → (JSON, height served); raises
        :class:`HeightPruned` when the node has pruned that height."""
        return self._get_at(path, height)

    def current_epoch(self) -> dict:
        return self._get("/get_current_epoch")

    def epoch_info(self) -> dict:
        """``QueryEpochInfoResponse {block_height, params (the whole module Params), latest_epoch}``."""
        return self._get("/epoch_info")

    def applied_plan(self, name: str) -> dict:
        """cosmos-sdk x/upgrade ``QueryAppliedPlanRequest``: ``{"height": "<block the plan was applied at>"}``,
        "0" while the plan has not been applied."""
        return self.http.get_json(f"/cosmos/upgrade/v1beta1/applied_plan/{quote(name, safe='')}")

    def epoch_group_data(self, epoch: int, model_id: str | None = None) -> dict:
        return self._get(f"/epoch_group_data/{int(epoch)}", {"model_id": model_id} if model_id else None)

    def params(self, height: int | None = None) -> tuple[dict, int | None]:
        """Module params as of ``height`` (None: live) → (``{"params": {…}}``, height served); raises
        :class:`HeightPruned` when the node has pruned that height."""
        return self._get_at("/params", height)

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

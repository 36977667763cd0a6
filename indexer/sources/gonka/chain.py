"""Chain REST (grpc-gateway) client: ``<GONKA_CHAIN_REST_URL>/productscience/inference/inference/…`` (§5.1)."""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from indexer.sources.gonka.http import Fetcher

PREFIX = "/productscience/inference/inference"


class ChainRest:
    def __init__(self, fetcher: Fetcher) -> None:
        self.http = fetcher

    def _get(self, path: str, params: dict | None = None) -> Any:
        return self.http.get_json(PREFIX + path, params)

    def current_epoch(self) -> dict:
        return self._get("/get_current_epoch")

    def epoch_info(self) -> dict:
        return self._get("/epoch_info")

    def epoch_group_data(self, epoch: int, model_id: str | None = None) -> dict:
        return self._get(f"/epoch_group_data/{int(epoch)}", {"model_id": model_id} if model_id else None)

    def escrow(self, escrow_id: str | int) -> dict:
        """``{"escrow":{…},"found":true}`` or ``{"found":false}`` (pruned or unknown)."""
        return self._get(f"/devshard_escrow/{int(escrow_id)}")

    def host_epoch_stats(self, epoch: int, participant: str) -> dict:
        return self._get(f"/devshard_host_epoch_stats/{int(epoch)}/{quote(participant, safe='')}")

    def participant(self, address: str) -> dict:
        return self._get(f"/participant/{quote(address, safe='')}")

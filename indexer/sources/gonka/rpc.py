"""CometBFT RPC client (``<GONKA_RPC_URL>/tx_search``, ``/status``): escrow creations and settlements."""
from __future__ import annotations

from typing import Any, Iterator

from indexer.sources.gonka.http import Fetcher
from indexer.wire.rpc import TxEvent, tx_search_events, tx_search_total

PER_PAGE = 100


class CometRpc:
    def __init__(self, fetcher: Fetcher) -> None:
        self.http = fetcher

    def tx_search(self, query: str, event_type: str | None = None, per_page: int = PER_PAGE) -> Iterator[TxEvent]:
        """All events of the matching txs, page by page (1-based pages; never asks past the last page)."""
        page = 1
        while True:
            data: Any = self.http.get_json("/tx_search", {"query": f'"{query}"', "order_by": '"asc"',
                                                          "page": str(page), "per_page": str(per_page)})
            yield from tx_search_events(data, event_type)
            total = tx_search_total(data)
            if page * per_page >= total or not (data.get("result") or {}).get("txs"):
                return
            page += 1

    def escrows_created(self, epoch: int) -> list[TxEvent]:
        return list(self.tx_search(f"devshard_escrow_created.epoch_index='{int(epoch)}'", "devshard_escrow_created"))

    def escrows_settled(self, min_height: int = 0) -> list[TxEvent]:
        q = "devshard_escrow_settled.escrow_id EXISTS"
        if min_height:
            q += f" AND tx.height>={int(min_height)}"
        return list(self.tx_search(q, "devshard_escrow_settled"))

    def escrow_settled(self, escrow_id: str | int) -> list[TxEvent]:
        """The settlement event of one escrow (none while it is unsettled)."""
        return list(self.tx_search(f"devshard_escrow_settled.escrow_id='{int(escrow_id)}'", "devshard_escrow_settled"))

"""CometBFT RPC client (``<GONKA_RPC_URL>/tx_search``, ``/status``): escrow creations and settlements.

A node's ``tx_search`` answer is untrusted: its ``total_count`` bounds the pages asked for (and :data:`MAX_PAGES`
bounds that), and a page whose txs were served before ends the search as a lie. A search a node lied in is recorded
as that node's failure and run again from the first page on the next node.
"""
from __future__ import annotations

import hashlib
from typing import Any

from indexer.sources.gonka.http import Fetcher, FetchError
from indexer.wire.normalize import parse_u64
from indexer.wire.rpc import TxEvent, tx_search_events, tx_search_total

PER_PAGE = 100
MAX_PAGES = 1000  # 100,000 txs: far above one epoch's escrow creations or one window's settlements


def _tx_not_found(status: int, body: bytes) -> bool:
    return status != 200 and b"not found" in body


class TxSearchLie(FetchError):
    """A ``tx_search`` that cannot be true (a page served twice, more pages than its count, a count past the cap),
    told by the base URL ``node``."""

    def __init__(self, node: str, where: str, message: str) -> None:
        super().__init__(where, message, transient=True)
        self.node = node


class CometRpc:
    def __init__(self, fetcher: Fetcher) -> None:
        self.http = fetcher

    def tx_search(self, query: str, event_type: str | None = None, per_page: int = PER_PAGE) -> list[TxEvent]:
        """All events of the matching txs, page by page (1-based pages; never asks past the last page), from the
        first node that answers without lying (each lying node is recorded and moved last)."""
        last: FetchError | None = None
        for _ in range(len(self.http.base_urls)):
            try:
                return self._search(query, event_type, per_page)
            except TxSearchLie as exc:
                last = exc
                self.http.distrust(exc.node, exc)  # the next search starts elsewhere
        assert last is not None
        raise FetchError(last.url, f"every RPC node lied in tx_search: {last}", transient=True)

    def _search(self, query: str, event_type: str | None, per_page: int) -> list[TxEvent]:
        out: list[TxEvent] = []
        seen: set[bytes] = set()
        page, pages, size = 1, 1, per_page
        while True:
            data, node = self.http.get_json_from("/tx_search", {"query": f'"{query}"', "order_by": '"asc"',
                                                                "page": str(page), "per_page": str(per_page)})
            where = f"{node}/tx_search?query={query} page {page}"
            txs = ((data.get("result") or {}).get("txs") if isinstance(data, dict) else None) or []
            total = tx_search_total(data)
            if page == 1 and txs and len(txs) < min(per_page, total):
                # the node pages by fewer txs than asked (a proxy or node capping per_page below CometBFT's 100):
                # its pages hold that many, so counting them by per_page would stop short of total_count
                size = len(txs)
            pages = -(-total // size)
            if pages > MAX_PAGES:
                raise TxSearchLie(node, where, f"total_count {total} is past {MAX_PAGES} pages of {size}")
            if len(txs) > per_page:
                raise TxSearchLie(node, where, f"{len(txs)} txs on a page of {per_page}")
            key = hashlib.sha256(repr([(t.get("height"), t.get("hash"), t.get("index")) for t in txs
                                       if isinstance(t, dict)]).encode()).digest()
            if txs and key in seen:
                raise TxSearchLie(node, where, f"the same txs as an earlier page (total_count {total})")
            seen.add(key)
            out.extend(tx_search_events(data, event_type))
            if page >= pages or not txs:
                return out
            page += 1

    def tx(self, tx_hash: str, node: str) -> Any:
        """CometBFT ``/tx?hash=0x<HASH>`` from the base URL ``node`` alone: ``{"result": {hash, height, index,
        tx_result, tx (base64 TxRaw)}}``. A node that does not have it (never indexed, or its block pruned) answers
        an error naming the tx ``not found``: raised at once as an expected, permanent FetchError (retrying there
        cannot bring the block back; another node may keep it)."""
        return self.http.get_json_at(node, "/tx", {"hash": f"0x{tx_hash.upper()}"}, permanent=_tx_not_found)

    def earliest_height(self, node: str) -> int:
        """The oldest block the base URL ``node`` keeps (CometBFT ``status``: ``sync_info.earliest_block_height``;
        blocks below it are pruned there). Raises FetchError, or NormalizeError for an answer without it."""
        data = self.http.get_json_at(node, "/status")
        sync = ((data.get("result") or {}).get("sync_info") or {}) if isinstance(data, dict) else {}
        return parse_u64(sync.get("earliest_block_height") if isinstance(sync, dict) else None,
                         f"{node}/status sync_info.earliest_block_height")

    def escrows_created(self, epoch: int) -> list[TxEvent]:
        return self.tx_search(f"devshard_escrow_created.epoch_index='{int(epoch)}'", "devshard_escrow_created")

    def escrows_settled(self, min_height: int = 0) -> list[TxEvent]:
        q = "devshard_escrow_settled.escrow_id EXISTS"
        if min_height:
            q += f" AND tx.height>={int(min_height)}"
        return self.tx_search(q, "devshard_escrow_settled")

    def escrow_settled(self, escrow_id: str | int) -> list[TxEvent]:
        """The settlement event of one escrow (none while it is unsettled)."""
        return self.tx_search(f"devshard_escrow_settled.escrow_id='{int(escrow_id)}'", "devshard_escrow_settled")

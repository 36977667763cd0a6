"""What the poller stored before, read back to decide what to fetch and when an epoch is done: which escrows are final
or captured whole, their slots, an epoch's escrows and warm keys, epoch states and the progress watchdog's row.
:class:`indexer.poller.store.Store` has these reads (one connection, the poller's); its writes stay there."""
from __future__ import annotations

from typing import Iterable

import psycopg


class StoredReads:
    conn: psycopg.Connection

    # -- cursors --------------------------------------------------------------------------------
    def final_escrows(self, escrow_ids: Iterable[str]) -> set[str]:
        """The ids among ``escrow_ids`` whose settled log is complete (an ``escrow-final:<id>`` cursor): one keyed
        read of those sources, not every escrow-final cursor ever written."""
        sources = [f"escrow-final:{eid}" for eid in escrow_ids]
        if not sources:
            return set()
        rows = self.conn.execute("SELECT source FROM net.cursor WHERE source = ANY(%s) AND cursor IS NOT NULL",
                                 (sources,)).fetchall()
        return {source.split(":", 1)[1] for (source,) in rows}

    # -- what was stored before ------------------------------------------------------------------
    def stored_slots(self, escrow_ids: list[str]) -> dict[str, list[str]]:
        rows = self.conn.execute("SELECT escrow_id, slots FROM rec.escrow WHERE escrow_id = ANY(%s)", (escrow_ids,))
        return {escrow_id: list(slots or []) for escrow_id, slots in rows}

    def settlement_lost(self, escrow_id: str) -> bool:
        """Whether the escrow is stored as settled with no settlement transaction captured."""
        row = self.conn.execute("SELECT e.settled AND NOT EXISTS (SELECT 1 FROM rec.settlement s WHERE s.escrow_id = "
                                "e.escrow_id) FROM rec.escrow e WHERE e.escrow_id = %s", (escrow_id,)).fetchone()
        return bool(row and row[0])

    def captured_whole(self, escrow_ids: Iterable[str]) -> set[str]:
        """The ids among ``escrow_ids`` not final only because their settlement was read over the REST (``/tx`` still
        asked, so ``tx_raw`` is NULL): a settlement stored, and the log captured (the escrow's net.progress cursor)
        up to the nonce the settlement itself names. The settlement's nonce is the chain's word; the tip the hosts
        report is theirs, and a host under-reporting it would pass a truncated log as whole. A settlement with no
        nonce shows nothing whole. Nothing of these escrows is lost when the chain prunes them."""
        ids = list(escrow_ids)
        if not ids:
            return set()
        # both sides keyed: the settlements by their escrow ids, the progress rows by their sources
        rows = self.conn.execute(
            "SELECT s.escrow_id FROM rec.settlement s JOIN net.progress p ON p.source = 'escrow:' || s.escrow_id "
            "WHERE s.escrow_id = ANY(%s) AND p.source = ANY(%s) AND s.tx_raw IS NULL AND s.nonce IS NOT NULL "
            "AND p.cursor_position >= s.nonce", (ids, [f"escrow:{eid}" for eid in ids])).fetchall()
        return {eid for (eid,) in rows}

    def escrow_ids(self, epoch: int) -> list[str]:
        rows = self.conn.execute("SELECT escrow_id FROM rec.escrow WHERE epoch_index = %s", (epoch,)).fetchall()
        return [escrow_id for (escrow_id,) in rows]

    def exactly_granted(self, epoch: int) -> set[str]:
        """The participants whose warm keys for ``epoch`` are stored as read at the epoch's end height: any exact
        row makes them so (their grants are their exact rows, indexer.replay.material), whatever live readings were
        stored beside it."""
        return {p for (p,) in self.conn.execute(
            "SELECT participant FROM rec.warm_key WHERE epoch_index = %s GROUP BY 1 HAVING bool_or(read_exact)",
            (epoch,))}

    def epoch_known_before(self, epoch: int) -> bool:
        """Whether an epoch before ``epoch`` is stored."""
        return self.conn.execute("SELECT EXISTS (SELECT 1 FROM rec.epoch WHERE epoch_index < %s)",
                                 (epoch,)).fetchone()[0]

    # -- epoch states -------------------------------------------------------------------------------
    def epoch_states(self) -> dict[int, str]:
        return dict(self.conn.execute("SELECT epoch_index, state FROM net.epoch_state").fetchall())

    def stats_digest(self, epoch: int) -> str | None:
        row = self.conn.execute("SELECT stats_digest FROM net.epoch_state WHERE epoch_index = %s", (epoch,)).fetchone()
        return row[0] if row else None

    # -- progress watchdog ----------------------------------------------------------------------------
    def progress(self, source: str) -> tuple | None:
        """(source_position, cursor_position, stalled_cycles) of ``source``, or None."""
        return self.conn.execute("SELECT source_position, cursor_position, stalled_cycles FROM net.progress "
                                 "WHERE source = %s", (source,)).fetchone()

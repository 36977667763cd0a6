"""Records that contradict their escrow: a slot at or beyond the escrow's group size.

Checked per batch in the database thread, against the escrows of the batch and of earlier loads (sizes cached;
an escrow not yet known cannot be checked, and the replay rejects such a tx later if it is out of range)."""
from __future__ import annotations

import psycopg

from indexer.load.prepare import Prepared, printable


class SlotCheck:
    def __init__(self) -> None:
        self.sizes: dict[str, int | None] = {}

    def check(self, conn: psycopg.Connection, prepared: Prepared, source_id: int) -> dict[str, set[int]]:
        """Quarantine contradicting rows (appended to prepared.rejects); returns the rejected lines per kind."""
        self.sizes.update(prepared.escrow_sizes)
        needed = {row[1] for kb in prepared.kinds.values() for row in kb.slot_rows} - self.sizes.keys()
        if needed:
            found = dict(conn.execute("SELECT escrow_id, cardinality(slots) FROM rec.escrow WHERE escrow_id = ANY(%s)",
                                      (sorted(needed),)).fetchall())
            self.sizes.update({escrow_id: found.get(escrow_id) for escrow_id in needed})
        bad: dict[str, set[int]] = {}
        for kind, kb in prepared.kinds.items():
            for line, escrow_id, fields, raw in kb.slot_rows:
                problem = self._problem(escrow_id, fields)
                if problem:
                    bad.setdefault(kind, set()).add(line)
                    prepared.rejects.append((source_id, line, kind, problem, printable(raw)))
        return bad

    def _problem(self, escrow_id: str, fields) -> str | None:
        size = self.sizes.get(escrow_id)
        if size is None:
            return None
        for name, slot, is_votes in fields:
            if slot is not None and slot >= size:
                if is_votes:
                    return f"field {name}: a voter_slot is out of range for escrow with {size} slots"
                return f"field {name}: slot {slot} out of range for escrow with {size} slots"
        return None

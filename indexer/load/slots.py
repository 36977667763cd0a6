"""Records that contradict their escrow: a slot at or beyond the escrow's group size.

Checked per batch in the database thread, against the escrows of the batch and of earlier loads (sizes cached;
an escrow not yet known cannot be checked, and the replay rejects such a tx later if it is out of range). A batch
carries each escrow's highest slot per kind, so the common case is one comparison per escrow; only an escrow
that is exceeded has its lines looked up again.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import psycopg

from indexer.load.prepare import Prepared
from indexer.load.typed import printable, slot_offenders


class SlotCheck:
    def __init__(self) -> None:
        self.sizes: dict[str, int | None] = {}

    def check(self, conn: psycopg.Connection, prepared: Prepared, source_id: int,
              source_lines: Callable[[], Iterable[tuple[int, bytes]]]) -> tuple[dict[str, set[int]], list[tuple]]:
        """The contradicting rows: (the rejected lines per kind, their quarantine tuples); ``source_lines()`` gives
        the batch's (line, raw) pairs, read only for an escrow exceeded. ``prepared`` is left as it is, so a batch
        tried again (a deadlock victim) quarantines each line once."""
        self.sizes.update(prepared.escrow_sizes)
        needed = {e for kb in prepared.kinds.values() for e in kb.slot_max} - self.sizes.keys()
        if needed:
            found = dict(conn.execute("SELECT escrow_id, cardinality(slots) FROM rec.escrow WHERE escrow_id = ANY(%s)",
                                      (sorted(needed),)).fetchall())
            self.sizes.update({escrow_id: found.get(escrow_id) for escrow_id in needed})
        bad: dict[str, set[int]] = {}
        rejects: list[tuple] = []
        for kind, kb in prepared.kinds.items():
            exceeded = {e: size for e, top in kb.slot_max.items()
                        if (size := self.sizes.get(e)) is not None and top >= size}
            if not exceeded:
                continue
            for line, raw, reason in slot_offenders(source_lines(), kind, exceeded):
                bad.setdefault(kind, set()).add(line)
                rejects.append((source_id, line, kind, reason, printable(raw)))
        return bad, rejects

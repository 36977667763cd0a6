"""The dirty marks of one loader batch, written as the batch's last writes, escrows before epochs.

A batch's records dirty escrows (for the replay), whole epochs (for the rules stage) and, for the epoch-level
records verification reads (indexer.load.statements.VERIFY_INPUTS), the escrows of their epochs. They are gathered
while the batch loads and marked at its end in two statements, ``replay.dirty_escrow`` then ``rules.dirty_epoch``,
each in key order: the one order of every marker (indexer.db.lockorder). A replay chunk holds its escrows' marks
(its claim) and then marks their epochs; a batch that marked an epoch first and then waited for one of those escrows
would be a deadlock. Last, not as each kind loads: a mark is one row that every concurrent claim and marker of its key
locks, held from the mark to the commit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from indexer.db.marks import ESCROW_MARK, WHOLE_EPOCH
from indexer.load.statements import VERIFY_INPUTS
from indexer.records import KINDS

_ESCROWS = f"""
INSERT INTO replay.dirty_escrow (escrow_id)
SELECT unnest(%(escrows)s::text[])
UNION SELECT escrow_id FROM rec.escrow WHERE epoch_index = ANY(%(reverify)s::bigint[])
ORDER BY 1
ON CONFLICT {ESCROW_MARK}
"""
_EPOCHS = f"""
INSERT INTO rules.dirty_epoch (epoch_index)
SELECT DISTINCT unnest(%(epochs)s::bigint[]) ORDER BY 1
ON CONFLICT {WHOLE_EPOCH}
"""


@dataclass
class BatchMarks:
    escrows: set[str] = field(default_factory=set)
    epochs: set[int] = field(default_factory=set)
    reverify: set[int] = field(default_factory=set)  # epochs whose escrows verification re-checks

    def add(self, kind_name: str, scopes, reverify=None) -> None:
        """``scopes``: the escrows (or epochs) of ``kind_name`` records the batch inserted or changed; ``reverify``:
        of those epochs, the ones whose change verification reads (None: all of them)."""
        if KINDS[kind_name].scope == "escrow":
            self.escrows.update(scopes)
            return
        self.epochs.update(scopes)
        if kind_name in VERIFY_INPUTS:
            self.reverify.update(scopes if reverify is None else reverify)

    def write(self, conn: psycopg.Connection) -> None:
        """Mark them, in the batch's transaction."""
        if self.escrows or self.reverify:
            conn.execute(_ESCROWS, {"escrows": sorted(self.escrows), "reverify": sorted(self.reverify)},
                         prepare=True)
        if self.epochs:
            conn.execute(_EPOCHS, {"epochs": sorted(self.epochs)}, prepare=True)

"""Which of a load's escrow-keyed keys are new without asking the database (the probe of indexer.load.probe).

Every writer registers an escrow in rec.escrow_epoch, in the transaction that writes its first rows, before it
writes any of them (indexer.load.partitions: the lock of a tx batch, the sync of an escrow record). So an escrow
whose registry row this loader inserted had no rows of any kind then: it is *fresh* for this load. From then on the
only rows of a fresh escrow are the ones this loader wrote, and the loader remembers, per kind and escrow, the
highest second key column it wrote (the key ranges a batch carries: prepare.KindBatch.key_ranges). A later batch
whose range of a fresh escrow starts above that mark holds no key that exists: no probe is needed, in either record
order (an escrow's keys grow with its diffs, whichever escrows its lines interleave with).

Only a hint: a concurrent loader may still write rows of a fresh escrow (it found the registry row and probed the
database). The direct COPY then meets the unique index, which is exact, and the batch takes the staged path
(indexer.load.ingest.BatchLoader._insert_new). A mark is only ever taken after its batch committed: a batch rolled
back (a deadlock victim tried again) registers its escrows again.
"""
from __future__ import annotations


MAX_FRESH = 100_000  # escrows remembered; a poller's loader lives for months: past this it starts again (probes)


class KnownNew:
    """One loader's fresh escrows and, per routed kind, the highest key it wrote of each (None: written, range not
    known; then the database is asked)."""

    def __init__(self, limit: int = MAX_FRESH) -> None:
        self.limit = limit
        self.fresh: set[str] = set()
        self.high: dict[str, dict[str, int | None]] = {}

    def forget(self) -> None:
        """Everything: after a caller's transaction that held committed batches rolled back (their registry rows
        went with it), or when the memory is full."""
        self.fresh, self.high = set(), {}

    def to_probe(self, kind: str, batch, registered: set[str]) -> set[str]:
        """The escrows of `batch` (a prepare.KindBatch of a routed kind) whose keys of `kind` may exist already:
        those not fresh, and the fresh ones whose range does not start above what this loader wrote of them.
        ``registered``: escrows the open batch registered itself (fresh, nothing written yet)."""
        written = self.high.get(kind, {})
        out = set()
        for escrow in batch.scope:
            if escrow in registered:
                continue
            if escrow not in self.fresh:
                out.add(escrow)
            elif escrow in written:
                top, span = written[escrow], batch.key_ranges.get(escrow)
                if top is None or span is None or span[0] <= top:
                    out.add(escrow)
        return out

    def committed(self, registered: set[str], written: dict[str, object]) -> None:
        """After a batch committed: ``registered`` are fresh from now on; ``written`` maps each routed kind the batch
        wrote to its KindBatch, whose ranges raise the marks of the fresh escrows."""
        if len(self.fresh) + len(registered) > self.limit:
            self.forget()
        self.fresh |= registered
        for kind, batch in written.items():
            marks = self.high.setdefault(kind, {})
            for escrow in batch.scope:
                if escrow not in self.fresh:
                    continue
                span = batch.key_ranges.get(escrow)
                was = marks.get(escrow, -1)
                if span is None or was is None:
                    marks[escrow] = None
                else:
                    marks[escrow] = max(was, span[1])

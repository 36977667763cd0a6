"""Records that contradict their escrow: a slot at or beyond the escrow's group size, quarantined in any load order.

Checked per batch in the database thread, against the escrows of the batch and of earlier loads (sizes cached). A
batch carries each escrow's highest slot per kind, so the common case is one comparison per escrow; only an escrow
that is exceeded has its lines looked up again. A record loaded before its escrow cannot be checked then: when the
escrow record comes (a later batch or command), :meth:`SlotCheck.recheck_stored` moves the escrow's stored records
that exceed it to the quarantine, under their own file and line, so the end state does not depend on which came
first (the replay, which would otherwise reject such a tx as slot_out_of_range, never sees it).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import psycopg

from indexer.load.prepare import Prepared
from indexer.load.samekey import record_json
from indexer.load.typed import printable, slot_offenders
from indexer.records import KINDS, VOTES

_CHECKED = sorted(name for name, kind in KINDS.items() if kind.slot_fields)


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

    @staticmethod
    def recheck_stored(conn: psycopg.Connection, escrow_ids: list[str]) -> list[str]:
        """After escrow records were written: move the stored records of those escrows that name a slot beyond
        their group to the quarantine (each under the file and line it was loaded from). Returns the escrows that
        lost records (for the caller to mark for the replay), one entry per record moved."""
        lost: list[str] = []
        for name in _CHECKED:
            lost += [row[0] for row in conn.execute(_recheck(name), {"ids": escrow_ids}).fetchall()]
        return lost


def _recheck(name: str) -> str:
    kind = KINDS[name]
    field = kind.slot_fields[0]
    if kind.field(field).type == VOTES:
        over = f"EXISTS (SELECT 1 FROM jsonb_array_elements(t.{field}) v WHERE (v->>'voter_slot')::bigint >= e.n)"
        reason = f"'field {field}: a voter_slot is out of range for escrow with ' || g.n || ' slots'"
    else:
        over = f"t.{field} >= e.n"
        reason = f"'field {field}: slot ' || g.{field} || ' out of range for escrow with ' || g.n || ' slots'"
    # the escrow record came after this one: say so, it is why the line was stored first
    reason += " || ' (its escrow record was loaded after it)'"
    return f"""
WITH e AS (
  SELECT escrow_id, epoch_index, cardinality(slots) AS n FROM rec.escrow WHERE escrow_id = ANY(%(ids)s)
), g AS (  -- the escrow's rows are in its epoch's partition by now (EpochRouter.sync): only that one is probed
  DELETE FROM rec.{kind.table} t USING e
  WHERE t.escrow_id = e.escrow_id AND t.epoch_index = e.epoch_index AND {over}
  RETURNING t.*, e.n
), q AS (
  INSERT INTO rec.quarantine (source_id, line, kind, reason, raw)
  SELECT g.source_id, g.source_line, '{name}', {reason}, {record_json(kind, 'g.')}::text
  FROM g ORDER BY 1, 2
  ON CONFLICT (source_id, line) DO NOTHING
)
SELECT escrow_id FROM g ORDER BY 1"""

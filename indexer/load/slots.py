"""Records that contradict their escrow: a slot at or beyond the escrow's group size.

Checked per batch in the database thread, against the escrows of the batch and of earlier loads (sizes cached;
an escrow not yet known cannot be checked, and the replay rejects such a tx later if it is out of range)."""
from __future__ import annotations

import orjson
import psycopg

from indexer.load.kinds import KINDS, VOTES

# kind -> [(row position, field name, is a votes array)] for every slot-bearing field (row[0] is the line number)
SLOT_FIELDS = {name: [(1 + kind.columns.index(f), f, kind.field(f).type == VOTES) for f in kind.slot_fields]
               for name, kind in KINDS.items() if kind.slot_fields}
_ESCROW_SLOTS_AT = 1 + KINDS["escrow"].columns.index("slots")


class SlotCheck:
    def __init__(self) -> None:
        self.sizes: dict[str, int | None] = {}

    def check(self, conn: psycopg.Connection, rows: dict, rejects: list, source_id: int) -> None:
        """Move contradicting rows from `rows` to `rejects` (quarantine tuples)."""
        for row in rows.get("escrow", ()):
            self.sizes[row[1]] = len(row[_ESCROW_SLOTS_AT])
        needed = {row[1] for kind in SLOT_FIELDS for row in rows.get(kind, ())} - self.sizes.keys()
        if needed:
            found = dict(conn.execute("SELECT escrow_id, cardinality(slots) FROM rec.escrow WHERE escrow_id = ANY(%s)",
                                      (sorted(needed),)).fetchall())
            self.sizes.update({escrow_id: found.get(escrow_id) for escrow_id in needed})
        for kind, fields in SLOT_FIELDS.items():
            kept = []
            for row in rows.get(kind, ()):
                problem = self._problem(row, fields)
                if problem:
                    rejects.append((source_id, row[0], kind, problem, _as_json(kind, row)))
                else:
                    kept.append(row)
            if kind in rows and len(kept) != len(rows[kind]):
                rows[kind] = kept

    def _problem(self, row: tuple, fields) -> str | None:
        size = self.sizes.get(row[1])
        if size is None:
            return None
        for at, name, is_votes in fields:
            value = row[at]
            if is_votes:
                if any(v["voter_slot"] >= size for v in orjson.loads(value)):
                    return f"field {name}: a voter_slot is out of range for escrow with {size} slots"
            elif value is not None and value >= size:
                return f"field {name}: slot {value} out of range for escrow with {size} slots"
        return None


def _as_json(kind: str, row: tuple) -> str:
    record = {"kind": kind, **dict(zip(KINDS[kind].columns, row[1:-1]))}
    for name, kind_field in ((f.name, f) for f in KINDS[kind].fields):
        if kind_field.type == VOTES and isinstance(record.get(name), str):
            record[name] = orjson.loads(record[name])
    if row[-1]:
        record.update(orjson.loads(row[-1]))
    return orjson.dumps(record, default=str).decode()

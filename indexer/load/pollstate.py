"""The poller's state in an export: what a database rebuilt from `indexer export` (or an archive) needs to poll on
exactly where the old one stood.

What decides the next cycle's work is kept, one NDJSON line a row, after the records:

* ``poller_epoch_state`` (``net.epoch_state``): each epoch's finality (open, settling, final, with its reason), its
  escrow counts and the host-stats digest with how many consecutive polls read it unchanged. A final epoch is not
  polled again; a settling one goes on counting its stable reads.
* ``poller_cursor`` (``net.cursor``, rows with a cursor): the resume points (``escrow:<id>``: the last diff nonce
  stored, ``escrow-final:<id>``: the settled log complete, ``epoch:<E>``, ``chain``, ...) and when each last
  succeeded (the lag ``api.ingest_status`` and ``/ready`` show).
* ``poller_progress`` (``net.progress``): the watchdog's positions; an escrow whose settlement was read over the
  REST is final once its captured nonce reaches the settlement's (StoredReads.captured_whole).
* ``poller_awaited_payload`` (``net.awaited_payload``): the 0/0 Finishes whose payload is still asked again, with
  the attempts made and when the next is due (claims are leases, not state: not kept).

Not kept, because they describe the past or this server rather than where polling stands: errors and retry times
of cursors, ``net.failure`` and ``net.raw_response`` (history), ``net.snapshot_failure`` (read again every cycle),
``net.lease`` and ``net.frozen_partition`` (this server's work and relations).

Loading such a line never overrides state the database has: a row is inserted where its key has none, so a
database that polls on keeps its own. A line that does not type is quarantined with the field and why.
"""
from __future__ import annotations

from datetime import datetime

import orjson
import psycopg

MAX_I63 = 2**63 - 1
TEXT_LEN = 8192  # a source, cursor, digest, reason or error; a stored Finish record is bounded by the line itself

# kind -> (table, key columns, [(column, type, required)]); types: int (bigint, >= 0), int32 (>= 0), str, ts, state
KINDS: dict[str, tuple[str, tuple[str, ...], list[tuple[str, str, bool]]]] = {
    "poller_epoch_state": ("net.epoch_state", ("epoch_index",), [
        ("epoch_index", "int", True), ("state", "state", True), ("escrows", "int32", True),
        ("escrows_final", "int32", True), ("stats_digest", "str", False), ("stats_stable_polls", "int32", True),
        ("reason", "str", False), ("final_at", "ts", False)]),
    "poller_cursor": ("net.cursor", ("source",), [
        ("source", "str", True), ("cursor", "str", True), ("last_success_at", "ts", False)]),
    "poller_progress": ("net.progress", ("source",), [
        ("source", "str", True), ("source_position", "int", False), ("cursor_position", "int", False),
        ("stalled_cycles", "int32", True), ("stalled_since", "ts", False)]),
    "poller_awaited_payload": ("net.awaited_payload", ("escrow_id", "inference_id"), [
        ("escrow_id", "str", True), ("inference_id", "int", True), ("epoch_index", "int", True),
        ("protocol_version", "str", True), ("record", "record", True), ("attempts", "int32", True),
        ("first_missed_at", "ts", True), ("last_attempt_at", "ts", True), ("next_attempt_at", "ts", True),
        ("last_error", "str", False), ("given_up_at", "ts", False)]),
}
STATES = ("open", "settling", "final")


class _Bad(ValueError):
    pass


def _typed(name: str, kind: str, value):
    if kind in ("int", "int32"):
        top = MAX_I63 if kind == "int" else 2**31 - 1
        if type(value) is not int or not 0 <= value <= top:
            raise _Bad(f"field {name}: not an integer from 0 to {top}")
        return value
    if kind == "ts":
        if type(value) is not str:
            raise _Bad(f"field {name}: not a timestamp (ISO 8601 text)")
        try:
            out = datetime.fromisoformat(value)
        except ValueError:
            raise _Bad(f"field {name}: not a timestamp (ISO 8601 text)") from None
        if out.tzinfo is None:
            raise _Bad(f"field {name}: a timestamp without its time zone")
        return out
    if type(value) is not str or "\x00" in value:
        raise _Bad(f"field {name}: not a string")
    if kind != "record" and len(value) > TEXT_LEN:
        raise _Bad(f"field {name}: {len(value)} characters, more than {TEXT_LEN}")
    if kind == "state" and value not in STATES:
        raise _Bad(f"field {name}: not one of {', '.join(STATES)}")
    return value


def _row(kind: str, raw: str) -> tuple:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _Bad("not a JSON object") from None
    if not isinstance(obj, dict):
        raise _Bad("not a JSON object")
    out = []
    for name, typ, required in KINDS[kind][2]:
        value = obj.get(name)
        if value is None:
            if required:
                raise _Bad(f"field {name}: missing")
            out.append(None)
        else:
            out.append(_typed(name, typ, value))
    return tuple(out)


def take(conn: psycopg.Connection, rejects: list[tuple]) -> list[tuple]:
    """Of a batch's rejected lines (source_id, line, kind, reason, raw), store those of the poller-state kinds (each
    row where its key has none) and return the others, with the poller-state lines that did not type (their
    reason says which field). Caller's transaction."""
    rest, rows = [], {}
    for reject in rejects:
        source_id, line, kind, _, raw = reject
        if kind not in KINDS:
            rest.append(reject)
            continue
        try:
            rows.setdefault(kind, []).append(_row(kind, raw))
        except _Bad as exc:
            rest.append((source_id, line, kind, f"{kind}: {exc}", raw))
    for kind, values in rows.items():
        table, key, fields = KINDS[kind]
        cols = ", ".join(name for name, _, _ in fields)
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['%s'] * len(fields))}) "
                            f"ON CONFLICT ({', '.join(key)}) DO NOTHING", values)
    return rest


def _of_epochs(source: str) -> str:
    """SQL: whether a poller source belongs to the exported epochs (%(a)s..%(b)s): ``epoch:<E>`` and
    ``snapshot:<E>:…`` by their epoch, ``escrow:<id>`` and ``escrow-final:<id>`` by their escrow's; the sources of
    no epoch (chain, poll, hosts) only in a whole export (%(all)s)."""
    kind, key = f"split_part({source}, ':', 1)", f"split_part({source}, ':', 2)"
    epoch = f"CASE WHEN {key} ~ '^[0-9]{{1,18}}$' THEN {key}::bigint END"
    return (f"(%(all)s OR ({kind} IN ('epoch', 'snapshot') AND {epoch} BETWEEN %(a)s AND %(b)s) "
            f"OR ({kind} IN ('escrow', 'escrow-final') AND substr({source}, length({kind}) + 2) IN "
            f"(SELECT escrow_id FROM rec.escrow WHERE epoch_index BETWEEN %(a)s AND %(b)s)))")


_EXPORT = {
    "poller_epoch_state": "FROM net.epoch_state WHERE %(all)s OR epoch_index BETWEEN %(a)s AND %(b)s "
                          "ORDER BY epoch_index",
    "poller_cursor": f"FROM net.cursor WHERE cursor IS NOT NULL AND {_of_epochs('source')} ORDER BY source",
    "poller_progress": f"FROM net.progress WHERE {_of_epochs('source')} ORDER BY source",
    "poller_awaited_payload": "FROM net.awaited_payload WHERE %(all)s OR epoch_index BETWEEN %(a)s AND %(b)s "
                              "ORDER BY escrow_id, inference_id",
}


def write_state(conn: psycopg.Connection, out, epochs: tuple[int, int] | None) -> dict[str, int]:
    """The poller state of the epochs (all with None) to ``out`` as NDJSON lines; the count of each kind."""
    params = {"all": epochs is None, "a": epochs[0] if epochs else 0, "b": epochs[1] if epochs else 0}
    counts = {}
    for kind, rest in _EXPORT.items():
        pairs = ", ".join(f"'{name}', {name}" for name, _, _ in KINDS[kind][2])
        n = 0
        for (line,) in conn.execute(f"SELECT jsonb_strip_nulls(jsonb_build_object('kind', '{kind}', {pairs}))::text "
                                    f"{rest}", params):
            out.write(line.encode() + b"\n")
            n += 1
        counts[kind] = n
    return counts

"""Per-kind typing and validation of parsed NDJSON objects (interface.md §2 rules), done once in Python.

The reader already parses every line with orjson, so typing here is cheaper than a second JSON parse on the
server. A record either becomes a tuple in column order (+ unknown fields as JSON) or raises `Invalid` with a
reason naming the field. Checks that need other records (slot range against the escrow) stay set-based in SQL.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import orjson

from indexer.records import (BOOL, HEX, I64, ID, KINDS, OBJ, REASON, STR, STRS, TS, U32, U64, U64N, VOTES,
                             Kind)

MAX_I63, MAX_U64, MAX_I31 = 2**63 - 1, 2**64 - 1, 2**31 - 1
# A string of hex digits only (none is fine): deleting them from its bytes leaves nothing. 0.26 µs for a 64-digit
# hash where a regex match takes ~0.5 (the load checks one or two hashes on most lines). The generated fast paths
# (fastpath.py, structs.py) inline NON_HEX, which spares a call (0.15 µs); is_hex is the same expression.
HEX_BYTES = b"0123456789abcdefABCDEF"
NON_HEX = "{v}.encode('utf-8', 'surrogatepass').translate(None, HEX_BYTES)"  # what is left: empty when hex
is_hex = eval(f"lambda v: not {NON_HEX.format(v='v')}", {"HEX_BYTES": HEX_BYTES})  # noqa: S307 - a constant

_REASONS = {"refused": "refused", "1": "refused", "execution": "execution", "2": "execution"}


class Invalid(ValueError):
    pass


class NeedsExactParse(Exception):
    """Unknown fields hold a float, which may be an integer beyond 64 bits that orjson rounded: parse the line
    again exactly (indexer.sources.ndjson.loads_exact) and coerce with exact=True."""


def _has_float(value) -> bool:
    if type(value) is float:
        return True
    if type(value) is dict:
        return any(_has_float(v) for v in value.values())
    if type(value) is list:
        return any(_has_float(v) for v in value)
    return False


# inference.Decimal {value: int64, exponent: int32} (JSON: value a string or number, either key left out when 0). The
# views read it as numeric (fn.chain_decimal), which holds 131072 digits before the point and 16383 after: an
# exponent past those would stop every view over the epoch, so such a record is refused here with its path.
_DECIMAL_KEYS = frozenset({"value", "exponent"})
_DECIMAL_INT = re.compile(r"-?[0-9]{1,19}\Z")
_EXPONENTS = range(-16383, 131072 - 19 + 1)  # any int64 value times 10^exponent fits numeric


def _decimal_fault(value, path: str) -> str | None:
    """Where and why a chain decimal inside a published object cannot be read as one, or None."""
    if type(value) is list:
        return next((f for i, v in enumerate(value) if (f := _decimal_fault(v, f"{path}[{i}]"))), None)
    if type(value) is not dict:
        return None
    if "exponent" in value and value.keys() <= _DECIMAL_KEYS:
        exp, val = value["exponent"], value.get("value", 0)
        if type(exp) is str and _DECIMAL_INT.match(exp):  # an encoder that writes int32 as a string, as int64
            exp = int(exp)
        if type(exp) is not int or exp not in _EXPONENTS:
            return f"{path}: a decimal's exponent must be an integer in {_EXPONENTS.start}..{_EXPONENTS.stop - 1}, " \
                   f"got {_show(exp)}"
        if val is not None and not ((type(val) is int and abs(val) <= MAX_I63)
                                    or (type(val) is str and _DECIMAL_INT.match(val) and abs(int(val)) <= MAX_I63)):
            return f"{path}: a decimal's value must be a 64-bit integer, got {_show(val)}"
        return None
    return next((f for k, v in value.items() if (f := _decimal_fault(v, f"{path}.{k}"))), None)


def _int(v, name: str, lo: int, hi: int) -> int:
    if type(v) is int:
        n = v
    elif type(v) is str and v.isascii() and (v.isdigit() or (v[:1] == "-" and v[1:].isdigit())):
        n = int(v)
    else:
        raise Invalid(f"field {name}: not an integer: {_show(v)}")
    if n < lo:
        raise Invalid(f"field {name}: negative value: {_show(v)}" if lo == 0 else f"field {name}: out of range")
    if n > hi:
        raise Invalid(f"field {name}: out of range: {_show(v)}")
    return n


def _show(v) -> str:
    return repr(v)[:60] if isinstance(v, str) else _dumps(v)[:60]


def c_u64(v, name):
    return _int(v, name, 0, MAX_I63)


def c_u64n(v, name):
    return _int(v, name, 0, MAX_U64)


def c_i64(v, name):
    return _int(v, name, -MAX_I63, MAX_I63)


def c_u32(v, name):
    return _int(v, name, 0, MAX_I31)


def c_id(v, name):
    if type(v) is str and 0 < len(v) <= 128:
        return v
    if type(v) is int and 0 <= v <= MAX_U64:
        return str(v)
    raise Invalid(f"field {name}: not a string id: {_show(v)}")


def c_bool(v, name):
    if type(v) is bool:
        return v
    raise Invalid(f"field {name}: not a boolean: {_show(v)}")


def c_str(v, name):
    if type(v) is str:
        return v
    raise Invalid(f"field {name}: not a string: {_show(v)}")


def c_hex(v, name):
    if type(v) is str and is_hex(v):
        return v.lower()
    raise Invalid(f"field {name}: not a hex string: {_show(v)}")


def c_strs(v, name):
    if type(v) is list and all(type(x) is str for x in v):
        return v
    raise Invalid(f"field {name}: not an array of strings: {_show(v)}")


def c_votes(v, name):
    if type(v) is list:
        out = []
        for vote in v:
            if type(vote) is not dict or type(vote.get("accept")) is not bool:
                break
            try:
                out.append({"voter_slot": c_u32(vote.get("voter_slot"), "voter_slot"), "accept": vote["accept"]})
            except Invalid:
                break
        else:
            return orjson.dumps(out).decode()
    raise Invalid(f"field {name}: not an array of {{voter_slot, accept}}: {_show(v)}")


def c_reason(v, name):
    key = str(v).lower().removeprefix("timeout_reason_") if type(v) in (str, int) else None
    if key in _REASONS:
        return _REASONS[key]
    raise Invalid(f"field {name}: not refused or execution: {_show(v)}")


# PostgreSQL's timestamptz takes UTC offsets up to 15:59:59 either way; Python's datetime takes up to 23:59:59.
_MAX_OFFSET = timedelta(hours=15, minutes=59, seconds=59)


def c_ts(v, name):
    """An ISO-8601 string or unix seconds. Whatever Python parses but PostgreSQL would refuse (an offset beyond
    ±15:59:59, a year outside 1..9999) is Invalid here, so it is quarantined rather than failing the batch's COPY."""
    if type(v) is int and abs(v) < 10**11:
        try:
            return datetime.fromtimestamp(v, tz=timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise Invalid(f"field {name}: timestamp out of range: {_show(v)}") from None
    if type(v) is str:
        try:
            ts = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            offset = ts.utcoffset()
            if offset is None:
                return ts.replace(tzinfo=timezone.utc)
            if abs(offset) > _MAX_OFFSET:
                raise Invalid(f"field {name}: UTC offset beyond ±15:59:59: {_show(v)}")
            try:
                ts.astimezone(timezone.utc)  # year 1 or 9999 pushed out of range by its offset
            except OverflowError:
                raise Invalid(f"field {name}: timestamp out of range: {_show(v)}") from None
            return ts
    raise Invalid(f"field {name}: not a timestamp: {_show(v)}")


def c_obj(v, name):
    """A published object, stored as is. Floats are refused: orjson has already rounded them, and the chain writes
    decimals as {value, exponent} or decimal strings, so a float means the record was not written that way."""
    if type(v) is not dict:
        raise Invalid(f"field {name}: not a JSON object: {_show(v)}")
    if _has_float(v):
        raise Invalid(f"field {name}: holds a float; write decimals as {{value, exponent}} or decimal strings")
    if fault := _decimal_fault(v, name):
        raise Invalid(f"field {fault}")
    return _dumps(v)


def within(v, name: str, max_len: int | None, max_items: int | None) -> None:
    """Raise Invalid when a typed value is past its field's bound (indexer.records.BOUNDS): a string longer than
    ``max_len`` characters, an array of more than ``max_items`` entries or with a longer string."""
    if type(v) is str:
        if max_len is not None and len(v) > max_len:
            raise Invalid(f"field {name}: {len(v)} characters, more than the {max_len} allowed")
        return
    if type(v) is list:
        if max_items is not None and len(v) > max_items:
            raise Invalid(f"field {name}: {len(v)} entries, more than the {max_items} allowed")
        if max_len is not None:
            for i, item in enumerate(v):
                if type(item) is str and len(item) > max_len:
                    raise Invalid(f"field {name}[{i}]: {len(item)} characters, more than the {max_len} allowed")


COERCERS = {ID: c_id, U64: c_u64, U64N: c_u64n, I64: c_i64, U32: c_u32, BOOL: c_bool, STR: c_str, HEX: c_hex,
            STRS: c_strs, VOTES: c_votes, REASON: c_reason, TS: c_ts,
            OBJ: c_obj}


class Coercer:
    """The field plan of one kind: every field checked by its type's coercer, with a reason naming the field.
    Ordinary records take the generated fast path (indexer.load.typed.fastpath) and never get here."""

    def __init__(self, kind: Kind):
        self.kind = kind
        self.plan = [(f.name, COERCERS[f.type], f.required) for f in kind.fields]
        self.bounds = {f.name: (f.max_len, f.max_items) for f in kind.fields if f.max_len or f.max_items}
        self.known = frozenset(["kind", *kind.columns])

    def __call__(self, obj: dict, exact: bool = False) -> tuple:
        return self.slow(obj, exact)

    def slow(self, obj: dict, exact: bool = False) -> tuple:
        row = []
        for name, fn, required in self.plan:
            v = obj.get(name)
            if v is None:
                if required:
                    raise Invalid(f"missing field {name}")
                row.append(None)
            else:
                row.append(fn(v, name))
                if name in self.bounds:
                    within(v, name, *self.bounds[name])
        if obj.keys() <= self.known:
            row.append(None)
        else:
            extra = {k: v for k, v in obj.items() if k not in self.known}
            if not exact and _has_float(extra):
                raise NeedsExactParse
            row.append(_dumps(extra))
        return tuple(row)


def _dumps(value) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits in unknown fields
        import json

        return json.dumps(value, ensure_ascii=False)


COERCE = {name: Coercer(kind) for name, kind in KINDS.items()}

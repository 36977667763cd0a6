"""Streaming NDJSON reader: plain, gzip (detected by magic bytes, not by name) or stdin.

Cuts a file into blocks of whole lines with constant memory (`InputFile.open_blocks`); `block_lines` yields
(line_number, raw_bytes) for every non-blank line of a block. Classification of each line
(JSON object with a known kind, or quarantine with a reason) is `classify_line`, kept pure for property tests.
"""
from __future__ import annotations

import gzip
import json
import os
import queue
import re
import shutil
import stat
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

import orjson

from indexer.records import KINDS
from indexer.sources.epochs import read_digest
from indexer.sources.gunzip import GzipUntilBroken

GZIP_MAGIC = b"\x1f\x8b"
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_CHUNK = 1 << 20
BLOCK_BYTES = 8 << 20  # a block's size when its lines are long; ~50,000 lines of a usual log fit in 10 MB
# No record comes near this (the longest are Finishes with a stored response payload, kilobytes to a few MB). A line
# past it (a file without newlines, a corrupt or hostile record) is read past, not held: it is quarantined with its
# first bytes, and the load keeps its memory and goes on (LongLine).
MAX_LINE_BYTES = 64 << 20
UTF8_BOM = b"\xef\xbb\xbf"
LONG_LINE_KEPT = 4096  # the first bytes of such a line kept for its quarantine row

# a \u0000 escape itself, not the text "\u0000" behind an escaped backslash ("\\u0000" in the JSON)
_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


@dataclass(frozen=True)
class LongLine:
    """In place of a block: one line past MAX_LINE_BYTES, read past without being held (its number, its length
    without the newline, its first LONG_LINE_KEPT bytes)."""
    line: int
    size: int
    head: bytes


class InputError(Exception):
    """Bad usage or unreadable input (exit code 2)."""


@dataclass(frozen=True, slots=True)
class Accepted:
    kind: str
    obj: dict | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str
    kind: str | None = None


class NumberOutOfRange(ValueError):
    """A JSON number beyond what a double holds (1e400): valid JSON, but it has no faithful stored value."""


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise NumberOutOfRange(f"number {text[:40]} is out of range (beyond a 64-bit float)")
    return value


def loads_exact(raw: bytes):
    """The stdlib parser, held to strict JSON: UTF-8 only, no NaN/Infinity, no numbers beyond a double's range,
    no unpaired surrogates."""
    obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
    if _SURROGATE.search(raw):
        json.dumps(obj, ensure_ascii=False).encode("utf-8")  # UnicodeEncodeError on an unpaired surrogate
    return obj


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def key_count(value) -> int:
    """The keys of a parsed JSON value, nested objects' included."""
    if type(value) is dict:
        n, values = len(value), value.values()
    elif type(value) is list:
        n, values = 0, value
    else:
        return 0
    for v in values:  # no call (nor generator) for a scalar: most values are (~11 -> ~4 us for a timeout's line)
        t = type(v)
        if t is dict or t is list:
            n += key_count(v)
    return n


def duplicate_key(raw: bytes, obj) -> str | None:
    """The first key a JSON object line repeats inside one object, or None. orjson keeps the last value
    silently, so `{"kind":"bogus","kind":"start"}` would load as a start. Every key is followed by exactly one
    colon, so when the line holds no more colons than the parsed objects hold keys, no key was dropped: only
    lines with more colons (a duplicate, or colons inside strings such as timestamps) are parsed again."""
    colons, keys = raw.count(b":"), key_count(obj)
    if colons <= keys:
        return None
    # Colons inside strings (a refusal's payload, a timestamp): without a \u escape each colon of a parsed string,
    # key or value, is one colon of the line, so a line whose colons are exactly its keys' plus its strings' lost
    # no key (a dropped key would add its own colon, and its strings', to the line only). orjson writes the parsed
    # value back with exactly those colons (one after each key, strings as they are): ~1 µs against ~25 for the
    # second parse. An integer past 64 bits (a value loads_exact read) it cannot write: the parse decides.
    if b"\\u" not in raw:
        try:
            if colons == orjson.dumps(obj).count(b":"):
                return None
        except TypeError:
            pass
    try:
        json.loads(raw.decode("utf-8", "replace"), object_pairs_hook=_no_duplicates)
    except _DuplicateKey as dup:
        return str(dup.args[0])
    except ValueError:
        return None  # what the stdlib refuses but orjson took is judged elsewhere
    return None


def malformed(raw: bytes, exc: ValueError) -> str:
    """The reason for a line that is not JSON, with where in the line (1-based byte): the parser's own "line 1
    column 1 (char 0)" reads like a position in the file."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"malformed JSON: not valid UTF-8 at byte {bad.start + 1} of the line"
    what, pos = getattr(exc, "msg", None), getattr(exc, "pos", None)
    if not isinstance(what, str) or not isinstance(pos, int):
        return f"malformed JSON: {str(exc)[:120]}"
    return f"malformed JSON: {what[:120]} at byte {len(text[:pos].encode()) + 1} of the line"


def classify_line(raw: bytes) -> Accepted | Rejected:
    """Decide whether a line is a JSON object of a known kind (its fields are typed next, by indexer.load)."""
    try:
        # orjson reads integers beyond 64 bits as floats; known fields reject floats anyway, and records whose
        # unknown fields hold a float are parsed again exactly (loads_exact) by the load stage. orjson raises
        # only JSONDecodeError, bad UTF-8 and nesting depth included.
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if _SURROGATE.search(raw):  # orjson and PostgreSQL refuse unpaired surrogate escapes
            return Rejected(malformed(raw, exc))
        try:  # orjson refuses numbers beyond double range that are still valid JSON
            obj = loads_exact(raw)
        except NumberOutOfRange as big:
            return Rejected(str(big), kind=_kind_hint(raw))
        except (ValueError, UnicodeDecodeError, RecursionError):
            return Rejected(malformed(raw, exc))
    if not isinstance(obj, dict):
        return Rejected(f"not a JSON object but {type(obj).__name__}")
    if (dup := duplicate_key(raw, obj)) is not None:
        return Rejected(f"duplicate key {dup[:60]!r} in one object", kind=_kind_hint(raw))
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return Rejected("missing or non-string field kind")
    if kind not in KINDS:
        return Rejected(f"unknown kind {kind[:60]!r}", kind=kind[:60])
    if b"\\u0000" in raw and _NUL_ESCAPE.search(raw):  # valid JSON, but PostgreSQL cannot store NUL characters
        return Rejected("contains \\u0000, which PostgreSQL jsonb cannot store", kind=kind)
    return Accepted(kind, obj)


_KIND_HINT = re.compile(rb'"kind"\s*:\s*"([A-Za-z_]{1,60})"')


def _kind_hint(raw: bytes) -> str | None:
    """The kind a rejected line claims (its first "kind"), for api.quarantine, when it names a known kind."""
    m = _KIND_HINT.search(raw)
    kind = m.group(1).decode() if m else None
    return kind if kind in KINDS else None


@dataclass
class InputFile:
    """A file to ingest, with the digest that identifies it for provenance and resume."""
    uri: str
    path: Path
    size: int
    digest: str
    _spooled: bool = False
    epochs: frozenset[int] | None = None  # the epochs its escrow records name (indexer.sources.epochs), if known

    def open_blocks(self, lines_per_block: int, progress=None, *, max_bytes: int = BLOCK_BYTES,
                    chunk_bytes: int = _CHUNK,
                    ramp_from: int | None = None) -> Iterator[tuple[int, bytes | LongLine]]:
        """Yield (first_line_number, block): the file cut into blocks of whole lines, `lines_per_block` of them
        or, when lines are long, about `max_bytes` (so memory stays bounded whatever the lines hold); the last
        block may be shorter. A line past MAX_LINE_BYTES comes alone, as (its number, :class:`LongLine`). Lines
        are only counted here; `block_lines` splits a block where it is typed.
        With `ramp_from`, the first block has that many lines and each next one twice as many, up to
        `lines_per_block`: a pipeline's consumer gets its first block sooner."""
        first, pieces, have, size = 1, [], 0, 0
        open_line = 0  # bytes of the last line in `pieces`, not ended yet
        want = min(ramp_from or lines_per_block, lines_per_block)
        with open(self.path, "rb") as raw:
            stream: BinaryIO = GzipUntilBroken(gzip.GzipFile(fileobj=raw)) if _is_gzip(self.path) else raw
            chunk = self._read(stream, chunk_bytes, first)
            if chunk.startswith(UTF8_BOM):  # a byte order mark some editors write first: RFC 8259 §8.1 lets a
                chunk = chunk[len(UTF8_BOM):]  # parser ignore it (one inside the file stays the line's error)
            while chunk:
                newlines = chunk.count(b"\n")
                # (the cuts below fall on newlines, so they leave the open line as it is)
                open_line = len(chunk) - chunk.rfind(b"\n") - 1 if newlines else open_line + len(chunk)
                while have + newlines >= want:
                    cut = _after_newlines(chunk, want - have)
                    pieces.append(chunk[:cut])
                    yield first, b"".join(pieces)
                    first, pieces, have, size = first + want, [], 0, 0
                    want = min(want * 2, lines_per_block)
                    chunk = chunk[cut:]
                    newlines = chunk.count(b"\n")
                pieces.append(chunk)
                have, size = have + newlines, size + len(chunk)
                if have and (size >= max_bytes or open_line > MAX_LINE_BYTES):  # cut after the last whole line
                    data = b"".join(pieces)
                    cut = data.rfind(b"\n") + 1
                    yield first, data[:cut]
                    first, pieces, have, size = first + have, [data[cut:]], 0, len(data) - cut
                    want = min(want * 2, lines_per_block)
                if open_line > MAX_LINE_BYTES:  # the open line is past the limit: read past it
                    long_line, chunk = self._past_long_line(stream, chunk_bytes, first, pieces, size)
                    yield first, long_line
                    first, pieces, have, size, open_line = first + 1, [], 0, 0, 0
                    chunk = chunk or self._read(stream, chunk_bytes, first)  # its newline ended the last read
                else:
                    chunk = self._read(stream, chunk_bytes, first + have)
                if progress is not None:
                    progress(raw.tell())
            broken = getattr(stream, "error", None)
        if broken is not None:  # the whole lines before the break, then where it broke (its line is dropped)
            data = b"".join(pieces)
            whole = data[: data.rfind(b"\n") + 1]
            if whole:
                yield first, whole
            raise InputError(f"{self.uri}: corrupt or truncated gzip data in line {first + have}: {broken}")
        if any(pieces):
            yield first, b"".join(pieces)

    def _past_long_line(self, stream: BinaryIO, chunk_bytes: int, line: int, pieces: list[bytes],
                        size: int) -> tuple[LongLine, bytes]:
        """Read to the end of the open line ``line`` (``pieces``, ``size`` bytes so far, no newline among them),
        keeping only its first bytes; returns it as a :class:`LongLine` and what follows its newline."""
        head, kept = bytearray(), LONG_LINE_KEPT
        for piece in pieces:
            head += piece[:kept - len(head)]
        pieces.clear()
        while chunk := self._read(stream, chunk_bytes, line):
            end = chunk.find(b"\n")
            head += (chunk if end < 0 else chunk[:end])[:kept - len(head)]
            if end >= 0:
                return LongLine(line, size + end, bytes(head)), chunk[end + 1:]
            size += len(chunk)
        return LongLine(line, size, bytes(head)), b""  # the file ends inside the line

    def _read(self, stream: BinaryIO, size: int, line: int) -> bytes:
        """The next chunk; a read that fails is bad input naming the file and the line (a gzip stream's break is
        reported by open_blocks, after the lines before it: GzipUntilBroken)."""
        try:
            return stream.read(size)
        except OSError as exc:
            raise InputError(f"{self.uri}: reading failed in line {line}: {exc}") from None

    def cleanup(self) -> None:
        if self._spooled:
            self.path.unlink(missing_ok=True)


def read_ahead(blocks: Iterator[tuple[int, bytes]], depth: int = 2) -> Iterator[tuple[int, bytes]]:
    """`blocks` read on a thread of their own, up to `depth` blocks ahead of the consumer. A load's committing
    thread spends most of its time waiting for the server (the GIL released), and reading, counting and joining the
    blocks (~0.4 s of a 978k-line file) happens here while the server works, not on that thread between commits.
    An error while reading (a corrupt gzip stream) reaches the consumer where the block would have, after every
    block before it; a consumer that stops early stops the reader."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()  # always the reader's last item, whatever ended it

    def read() -> None:
        try:
            for item in blocks:
                if stop.is_set():
                    break
                ready.put(item)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            ready.put(exc)
        finally:
            ready.put(end)

    reader = threading.Thread(target=read, name="block-reader", daemon=True)
    reader.start()
    owner = os.getpid()
    item = None
    try:
        while (item := ready.get()) is not end:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        # A copy of this generator in a forked child (a worker forked while a load's generator awaited collection)
        # has no reader thread: waiting for its end marker there would hang the child for ever (it did, in a test).
        if os.getpid() == owner:
            stop.set()
            while item is not end:  # take what the reader still puts (a put may be blocked) up to its end marker
                item = ready.get()
            reader.join()
            if hasattr(blocks, "close"):
                blocks.close()  # the file is closed by the generator's own exit


def block_lines(first_line: int, block: bytes) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of a block from `InputFile.open_blocks`, numbered from 1 at the file's first line
    (blank lines count), without their line ending."""
    for number, line in enumerate(block.split(b"\n"), start=first_line):
        line = line.rstrip(b"\r")
        if line.strip():
            yield number, line


def _after_newlines(data: bytes, n: int) -> int:
    """Offset just past the n-th newline of data (which has at least n)."""
    at = 0
    for _ in range(n):
        at = data.index(b"\n", at) + 1
    return at


def check_input(name: str) -> None:
    """Raise InputError, naming the file, when `name` cannot be ingested: missing, a directory, not readable. Cheap
    (nothing is read), so every file of a command is checked before the first one loads."""
    if name == "-":
        return
    path = Path(name)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot be read: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{name}: is a directory, not an NDJSON file")
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        raise InputError(f"{name}: not a regular file or a pipe")
    if stat.S_ISREG(mode):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise InputError(f"{name}: cannot be read: {exc.strerror}") from None


def open_input(name: str) -> InputFile:
    if name == "-":
        return _spool(sys.stdin.buffer, "stdin")
    check_input(name)
    path = Path(name)
    if stat.S_ISFIFO(path.stat().st_mode):  # a pipe (e.g. <(zcat ...)) is read once, like stdin
        with open(path, "rb") as fh:
            return _spool(fh, str(path))
    try:
        digest, epochs = digest_and_epochs(path)
        return InputFile(uri=str(path.resolve()), path=path, size=path.stat().st_size, digest=digest, epochs=epochs)
    except OSError as exc:
        raise InputError(f"{name}: cannot be read: {exc.strerror or exc}") from None


def digest_and_epochs(path: Path) -> tuple[str, frozenset[int] | None]:
    """The file's digest, and the epochs its escrow records name (None for a gzip file: its bytes are not lines)."""
    return read_digest(path, _CHUNK, lines=not _is_gzip(path), max_line=MAX_LINE_BYTES)


def _spool(stream: BinaryIO, uri: str) -> InputFile:
    """stdin or a pipe is read once into a temp file: the digest must be known before the first batch commits."""
    tmp = tempfile.NamedTemporaryFile(prefix="indexer-stdin-", suffix=".ndjson", delete=False)
    with tmp:
        shutil.copyfileobj(stream, tmp, _CHUNK)
    path = Path(tmp.name)
    digest, epochs = digest_and_epochs(path)
    return InputFile(uri=uri, path=path, size=path.stat().st_size, digest=digest, _spooled=True, epochs=epochs)


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC

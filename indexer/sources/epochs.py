"""The epochs a file's escrow records name, found while its digest is computed (the one read of the whole file
before the load), so that the loader can create their partitions before its first batch instead of in the middle
of the load, where a creation waits for the replay that follows the load (docs/partitioning.md).

A hint, not a parse: a line whose ``"kind"`` is ``"escrow"`` names its ``"epoch_index"``. A line that turns out bad
costs at most an empty partition; an epoch the hint missed is still made by the loader before its batch."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

MAX_EPOCHS = 64  # a file naming more epochs than this gets none up front: each partition is tables for every query
_MAX_EPOCH = (1 << 63) - 1

_ESCROW = re.compile(rb'"kind"\s*:\s*"escrow"')
_EPOCH = re.compile(rb'"epoch_index"\s*:\s*(\d{1,19})\b')


class EpochScan:
    """Feed the file's bytes in order (``feed``); ``epochs()`` is what the escrow lines named, or None when they
    named more than MAX_EPOCHS. A line longer than ``max_line`` bytes (the loader's limit: it quarantines such a
    line unread) is not held: it is skipped to its end."""

    def __init__(self, max_line: int) -> None:
        self._found: set[int] = set()
        self._max_line = max_line
        self._open = b""  # the start of the line the last chunk ended in
        self._skipping = False  # inside a line past max_line: nothing of it is kept

    def feed(self, chunk: bytes) -> None:
        first = chunk.find(b"\n")
        if first < 0:
            if not self._skipping:
                self._open += chunk
                if len(self._open) > self._max_line:
                    self._open, self._skipping = b"", True
            return
        if not self._skipping and len(self._open) + first <= self._max_line:
            self._line(self._open + chunk[:first])
        self._skipping = False
        last = chunk.rfind(b"\n")
        at = chunk.find(b'"escrow"', first + 1, last)  # bytes.find, not the regex, over most of the file
        while at >= 0:
            start, end = chunk.rfind(b"\n", 0, at) + 1, chunk.find(b"\n", at)
            if _ESCROW.search(chunk, start, end):
                self._epoch(chunk, start, end)
            at = chunk.find(b'"escrow"', end, last)
        self._open = chunk[last + 1:]
        if len(self._open) > self._max_line:
            self._open, self._skipping = b"", True

    def epochs(self) -> frozenset[int] | None:
        self._line(self._open)
        self._open = b""
        return frozenset(self._found) if len(self._found) <= MAX_EPOCHS else None

    def _line(self, line: bytes) -> None:
        if _ESCROW.search(line):
            self._epoch(line, 0, len(line))

    def _epoch(self, data: bytes, start: int, end: int) -> None:
        if len(self._found) > MAX_EPOCHS:
            return
        match = _EPOCH.search(data, start, end)
        if match and int(match.group(1)) <= _MAX_EPOCH:
            self._found.add(int(match.group(1)))


def read_digest(path: Path, chunk_bytes: int, *, lines: bool, max_line: int) -> tuple[str, frozenset[int] | None]:
    """The sha256 of the file's bytes and, when they are lines (``lines``: not gzip), the epochs its escrow
    records of at most ``max_line`` bytes name."""
    h, scan = hashlib.sha256(), EpochScan(max_line) if lines else None
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_bytes):
            h.update(chunk)
            if scan is not None:
                scan.feed(chunk)
    return h.hexdigest(), None if scan is None else scan.epochs()

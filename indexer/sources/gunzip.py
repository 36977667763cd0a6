"""Reading a gzip stream so that a corruption or truncation is found at the line where it is."""
from __future__ import annotations

import gzip
import zlib


class GzipUntilBroken:
    """A gzip stream whose ``read(size)`` returns every byte decompressed before a corruption or truncation, then
    ends (``b""``) with the error kept in ``error`` for the reader to report at the line it broke in.
    GzipFile.read(size) raises at once and drops what it decompressed in that call (up to a whole chunk of many
    lines): the break would be placed at the chunk's first line and the whole lines before it never read.
    Reading through read1, one decompression step at a time, keeps them."""

    def __init__(self, stream: gzip.GzipFile) -> None:
        self.stream = stream
        self.error: BaseException | None = None

    def read(self, size: int) -> bytes:
        pieces, have = [], 0
        while have < size and self.error is None:
            try:
                piece = self.stream.read1(size - have)
            except (OSError, EOFError, zlib.error) as exc:
                self.error = exc
                break
            if not piece:
                break
            pieces.append(piece)
            have += len(piece)
        return b"".join(pieces)

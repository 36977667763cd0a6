"""One source's prepared batch, assembled from parts typed elsewhere.

The poller decodes diff logs in worker processes, and those workers also type the lines they write (the typing
leaves the poller's busiest thread). A worker does not know which source its lines will belong to, nor where in it:
it types them with the placeholder source id ``PLACEHOLDER_SOURCE`` and line numbers counted from its first line.
:func:`assemble` gives every part its place (the line offset of its first line in the source) and the source's id,
types the few lines no worker saw (escrow records, host stats, refusals whose payload arrived later), and merges the
parts into the :class:`Prepared` that :meth:`indexer.load.ingest.BatchLoader.commit` takes, as if the whole source
had been typed in one piece.
"""
from __future__ import annotations

from collections.abc import Sequence

from indexer.load.prepare import KindBatch, Prepared, prepare_batch
from indexer.load.typer import shift_rows
from indexer.records import KINDS

PLACEHOLDER_SOURCE = 0  # rendered as the last column of each row ("\t0\n"); replaced by the real id here


def assemble(source_id: int, lines: Sequence[bytes], parts: Sequence[tuple[int, Prepared]],
             untyped: Sequence[int]) -> Prepared:
    """``lines`` is the whole source (line n is ``lines[n - 1]``); ``parts`` are (offset, part typed from line
    ``offset + 1`` on); ``untyped`` the 0-based positions that no part covers, typed here."""
    pieces = list(parts)
    if untyped:
        # numbered as in the source already: offset 0
        pieces.append((0, prepare_batch(PLACEHOLDER_SOURCE, [(i + 1, lines[i]) for i in untyped])))
    out = Prepared(len(lines), len(lines), {}, [])
    sid = str(source_id).encode()
    copies: dict[str, list[bytes]] = {}  # joined once at the end
    shared: set[str] = set()  # kinds whose parts share a scope
    for offset, part in pieces:
        for kind, kb in part.kinds.items():
            copies.setdefault(kind, []).append(_shift(kb.copy, offset, sid))
            have = out.kinds.get(kind)
            if have is None:
                out.kinds[kind] = KindBatch(b"", kb.count, set(kb.scope), dict(kb.slot_max), kb.distinct_keys,
                                            dict(kb.key_ranges))
            elif have.absorb(kb):
                shared.add(kind)
        out.rejects.extend((source_id, number + offset, *rest) for _, number, *rest in part.rejects)
        out.parses.extend(part.parses)
        out.escrow_sizes.update(part.escrow_sizes)
    for kind, kb in out.kinds.items():
        kb.copy = b"".join(copies[kind])
        # every key leads with its scope (escrow or epoch): parts whose scopes are disjoint cannot share a key; where
        # they overlap (two runs of one escrow, a refusal typed apart from its run) the keys are counted
        if kb.distinct_keys and kind in shared:
            kb.distinct_keys = _distinct_keys(kb.copy, len(KINDS[kind].key))
    out.source_lines = lambda: enumerate(lines, start=1)
    return out


def _shift(copy: bytes, offset: int, sid: bytes) -> bytes:
    """COPY rows typed with the placeholder source and part-relative line numbers → the source's numbers and id.
    Each row is ``line \\t columns … \\t source_id \\n``; the placeholder id is the single character "0". In C
    (``shift_rows``) because it touches every row of a poll, on the thread that gathers batches (~1.4 µs a row in
    Python)."""
    return shift_rows(copy, offset, sid) if copy else copy


def _distinct_keys(copy: bytes, n_key: int) -> bool:
    rows = copy.split(b"\n")
    rows.pop()
    return len({tuple(row.split(b"\t", n_key + 1)[1:n_key + 1]) for row in rows}) == len(rows)

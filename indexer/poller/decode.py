"""Decoding a run of host diff-log entries into NDJSON lines, typed for COPY, in worker processes.

Protobuf decoding, writing the records' lines (:mod:`indexer.wire.txlines`, straight from the message objects) and
typing them are the poller's largest CPU cost and pure functions of the entries, so they run in a small process pool
(``forkserver``: workers start from a clean process, never forked from the threaded poller) and the poller process
keeps the GIL for HTTP and loading. Finish records with 0 input and 0 output tokens are handed back as dicts
(``held``), because their stored response payload is fetched afterwards and goes into the record before it is
serialized.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from indexer.load.assemble import PLACEHOLDER_SOURCE
from indexer.load.prepare import Prepared, prepare_block
from indexer.verify.diff import DiffError, user_signer
from indexer.workers import pool as workers_pool, run_alone
from indexer.wire.diffs import diff_contents_from_host_json
from indexer.wire.errors import WireDecodeError
from indexer.wire.normalize import check_diff_escrow
from indexer.wire.txlines import TxLines

log = logging.getLogger(__name__)

PRELOAD = ["indexer.poller.decode"]  # its imports compile the loader's typing functions once per worker


@dataclass
class Decoded:
    """A decoded run: its lines (:meth:`lines`), the refusals held for their payloads, and the typed part."""
    blob: bytes                                # the NDJSON lines joined by newlines (one pickled object, not
                                               # thousands), empty at the positions of held records
    count: int                                 # lines in the blob
    held: list[tuple[int, dict[str, Any]]]     # (position, finish record waiting for its payload)
    txs: int                                   # protocol txs, modelled or not
    typed: Prepared                            # the lines but the held ones, typed (indexer.load.assemble)

    def lines(self) -> list[bytes]:
        return self.blob.split(b"\n") if self.count else []


class LogRejected(WireDecodeError):
    """A served log that fails the signed check: the serving member's log is not used (the message names the escrow,
    the nonce and the reason)."""


def decode_entries(escrow_id: str, version: str, entries: Sequence[Mapping[str, Any]], hold_refusals: bool,
                   source_host: str | None = None, creator: str | None = None) -> Decoded:
    out, txs = run_lines(escrow_id, version, entries, hold_refusals, source_host, creator)
    blob = b"\n".join(out.lines)
    # typed here, by the file load's block typer (C for the bulk kinds, ~1 µs a line against ~10 for typing the
    # dicts in Python): the poller's committing thread only renumbers the rows. A held record's place is a blank
    # line, numbered and never loaded, so every row keeps its position in the run.
    typed = prepare_block(PLACEHOLDER_SOURCE, 1, blob + b"\n")  # a run without records: one blank line
    return Decoded(blob, len(out.lines), out.held, txs, typed)


def run_lines(escrow_id: str, version: str, entries: Sequence[Mapping[str, Any]],
              hold_refusals: bool, source_host: str | None = None,
              creator: str | None = None) -> tuple[TxLines, int]:
    """A contiguous run of entries → its records' lines (and held refusals), then one ``signed_diff`` line per diff
    (what verification needs, served by ``source_host``), and how many txs it had. With ``creator``, every diff's
    user signature must recover to it first (:class:`LogRejected` at the first that does not)."""
    contents = diff_contents_from_host_json(entries, version, escrow_id)
    if creator is not None:
        check_signed(escrow_id, creator, contents)
    out = TxLines(escrow_id, version, _refusal if hold_refusals else None)
    txs = 0
    for i, (nonce, content, owner, _) in enumerate(contents):
        if nonce != contents[0][0] + i:  # checked on the headers already; the full decode agrees
            raise ValueError(f"diff run not contiguous at nonce {nonce}")
        check_diff_escrow(escrow_id, nonce, owner)
        txs += out.diff(nonce, content.txs)
    for nonce, _, _, signed in contents:  # after the txs' lines: the held records' positions stay as they are
        out.signed(nonce, signed, source_host)
    return out, txs


def check_signed(escrow_id: str, creator: str, contents: Sequence[tuple[int, Any, str, Any]]) -> None:
    """The *signed* check of a run (gonka-devshard.md §4.8): each diff's user signature, over the DiffContent the
    user signed (the served bytes, with the escrow id and the signed root as ``BuildDiffContent`` adds them),
    recovers to the escrow's creator. Made here, in the decode process beside the decoding, for every protocol
    version: the user signs DiffContent with no domain tag. A diff served without the signed root (an omitempty
    field some builds' DiffToJSON leaves out) is checked over the ``state_hash`` the member serves, the root an
    honest host's diff was signed over; one served without a user signature, or without either root, fails: leaving a
    field out never lets a diff past the check. A diff naming another escrow (in its signed content or beside it)
    fails too, though its creator signed it: the member serving it is lying about this log. (The stored ``signed_diff`` keeps what was served: its root stays null.)"""
    for nonce, _, owner, signed in contents:
        if owner and str(owner) != escrow_id:  # another escrow's diff, which the same creator signed, is not this log
            raise LogRejected(f"escrow {escrow_id} nonce {nonce}: signed check failed: the diff is for escrow "
                              f"{str(owner)[:80]!r}")
        if not signed.post_state_root:
            signed = signed._replace(post_state_root=signed.state_hash)
        if not signed.whole and not signed.post_state_root:  # the stage says the same of such a stored diff
            raise LogRejected(f"escrow {escrow_id} nonce {nonce}: signed check failed: no signed root served "
                              f"(neither post_state_root nor state_hash)")
        try:
            user_signer(signed.signed_bytes(escrow_id), signed.user_sig, creator)
        except DiffError as exc:
            raise LogRejected(f"escrow {escrow_id} nonce {nonce}: signed check failed: {exc}") from None


def _refusal(finish: Any) -> bool:
    """A Finish with 0 input and 0 output tokens: its stored response payload is fetched before it is typed."""
    return finish.input_tokens == 0 and finish.output_tokens == 0


class DecodeWorkerLost(Exception):
    """A decode process died under a run (killed, out of memory, a crash in native code) in the pool and again when
    the run was tried alone: that escrow fails this cycle, as a transient failure, and the others go on."""
    transient = True
    url = ""


class DecodePool:
    """The poller's decode processes. A process that dies breaks a ``ProcessPoolExecutor`` for good: every task then
    fails, so one bad moment would end the cycle and every escrow in it. Here a broken pool is replaced at once (by
    the first thread to see it), and each run that was in it is tried again alone, in a process of its own: the
    runs that were only beside the one that killed the worker succeed there, and a run that dies alone too is its
    escrow's failure (:class:`DecodeWorkerLost`), recorded and retried by the next cycle from the committed
    cursor, while the cycle and every other escrow go on."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.replaced = 0  # pools replaced after a worker died (for the log and the tests)
        self._lock = threading.Lock()
        self._pool = self._new()

    def _new(self) -> Executor:
        pool = workers_pool(self.workers, context="forkserver", preload=PRELOAD)
        # started at once, from a thread of their own: a forkserver imports the decoders' modules before it forks
        # the first worker (~0.3 s), and a pool started by its first task would have the first escrow's fetch
        # thread wait for that, while the cycle is still reading the chain and the cores have room
        self.started = threading.Thread(target=_start, args=(pool, self.workers), name="decoders-start", daemon=True)
        self.started.start()
        return pool

    @property
    def processes(self) -> dict:
        return self._pool._processes  # type: ignore[attr-defined]

    def run(self, fn, *args):
        """``fn(*args)`` in a decode process."""
        pool = self._pool
        try:
            return pool.submit(fn, *args).result()
        except BrokenProcessPool:
            self._replace(pool)
        try:  # a run that dies alone too is the one that kills its worker, not one that was beside it
            return run_alone(fn, *args, context="forkserver", preload=PRELOAD)
        except BrokenProcessPool as exc:
            raise DecodeWorkerLost(f"a decode process died twice on this run, the second time alone "
                                   f"({getattr(fn, '__name__', 'decode')})") from exc

    def _replace(self, broken: Executor) -> None:
        with self._lock:
            if self._pool is not broken:
                return  # another thread saw it first
            log.warning("a decode process died: replacing the decode pool (its runs in flight are tried again, "
                        "each alone)")
            self._pool = self._new()
            self.replaced += 1
        broken.shutdown(wait=False, cancel_futures=True)

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait)


def decode_pool(workers: int) -> DecodePool | None:
    """A pool of ``workers`` decode processes, or None (decode in the calling thread) when workers ≤ 0."""
    return DecodePool(workers) if workers > 0 else None


def _ready() -> None:
    """A task that only makes its pool start a worker."""


def _start(pool: Executor, workers: int) -> None:
    try:
        for started in [pool.submit(_ready) for _ in range(workers)]:
            started.result()
    except Exception:  # the pool was shut down first (a cycle that failed at once), or a worker died: nothing to start
        pass

"""Decoding a run of host diff-log entries into NDJSON lines, in worker processes.

Protobuf decoding, normalizing and serializing are the poller's largest CPU cost and pure functions of the
entries, so they run in a small process pool (``forkserver``: workers start from a clean process, never forked from
the threaded poller) and the poller process keeps the GIL for HTTP and loading. Finish records with 0 input and
0 output tokens are handed back as dicts (``held``), because their stored response payload is fetched afterwards
and goes into the record before it is serialized.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from indexer.wire.diffs import diff_from_host_json
from indexer.wire.normalize import dumps_record_bytes, normalize_diffs

PRELOAD = ["indexer.poller.decode"]


@dataclass
class Decoded:
    lines: list[bytes | None]                  # None at the positions of held records
    held: list[tuple[int, dict[str, Any]]]     # (position, finish record waiting for its payload)
    txs: int                                   # protocol txs, modelled or not


def decode_entries(escrow_id: str, version: str, entries: Sequence[Mapping[str, Any]], hold_refusals: bool) -> Decoded:
    diffs = [diff_from_host_json(e, version) for e in entries]
    for i, d in enumerate(diffs[1:], start=1):
        if d["nonce"] != diffs[0]["nonce"] + i:  # checked on the headers already; the full decode agrees
            raise ValueError(f"diff run not contiguous at nonce {d['nonce']}")
    out = normalize_diffs(escrow_id, diffs, version)
    lines: list[bytes | None] = []
    held: list[tuple[int, dict[str, Any]]] = []
    for rec in out.records:
        if hold_refusals and rec["kind"] == "finish" and rec.get("input_tokens") == 0 \
                and rec.get("output_tokens") == 0:
            held.append((len(lines), rec))
            lines.append(None)
        else:
            lines.append(dumps_record_bytes(rec))
    return Decoded(lines, held, len(out.records) + sum(out.other.values()))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # killed but not yet reaped
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _exit_with(poller_pid: int) -> None:
    """Worker initializer: leave when the poller dies. A worker blocks on its task queue, whose write end it holds
    itself, so after a ``kill -9`` of the poller it would wait forever (and keep the forkserver alive)."""
    def watch() -> None:
        while not _gone(poller_pid):
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="poller-watch", daemon=True).start()


def decode_pool(workers: int) -> Executor | None:
    """A process pool of ``workers`` decoders, or None (decode in the calling thread) when workers ≤ 0."""
    if workers <= 0:
        return None
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_exit_with,
                               initargs=(os.getpid(),))

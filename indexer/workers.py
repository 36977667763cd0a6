"""Worker process pools that never outlive their parent.

A pool worker blocks on its task queue, whose write end it holds itself, so after a `kill -9` of the owner it
would wait forever (and keep its pipes open). Each worker asks the kernel for SIGKILL when its parent dies (Linux
prctl PR_SET_PDEATHSIG: immediate for forked workers) and also watches the owner's pid from a thread (a
forkserver's workers have the server as parent, and the server can outlive the owner).
"""
from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

_PR_SET_PDEATHSIG = 1
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters
BULK_MMAP_THRESHOLD = 64 << 20
BULK_TRIM_THRESHOLD = 256 << 20


def pool(workers: int, context: str = "fork", preload: list[str] | None = None, *,
         bulk_memory: bool = False) -> ProcessPoolExecutor:
    """``bulk_memory``: the workers pass large buffers all the time (keep_freed_memory)."""
    ctx = multiprocessing.get_context(context)
    if preload and context == "forkserver":
        ctx.set_forkserver_preload(preload)
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                               initializer=_bulk_worker if bulk_memory else exit_with_parent,
                               initargs=(os.getpid(),))


def _bulk_worker(owner_pid: int) -> None:
    exit_with_parent(owner_pid)
    keep_freed_memory()


def exit_with_parent(owner_pid: int) -> None:
    """Pool initializer: leave when the owner process dies. Ctrl-C reaches the whole process group: workers ignore
    it, and the owner stops them in order (otherwise each would print its own KeyboardInterrupt traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the watcher below still applies
    threading.Thread(target=_watch, args=(owner_pid,), name="owner-watch", daemon=True).start()


def _watch(pid: int) -> None:
    while not gone(pid):
        time.sleep(0.5)
    os._exit(0)


def gone(pid: int) -> bool:
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


@contextmanager
def no_cyclic_gc():
    """For the hot loops of batch typing and replay: they allocate millions of acyclic objects, which reference
    counting frees, and the cyclic collector's passes would only keep re-walking them (measured: it cost more than
    the replay itself)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def keep_freed_memory() -> bool:
    """In a process that passes large buffers all the time (a load's typing workers, the replay follower): glibc
    malloc keeps buffers up to BULK_MMAP_THRESHOLD on its heap and freed memory up to BULK_TRIM_THRESHOLD, instead
    of mapping each large buffer (a block, its COPY text, their pickles: several MB each) afresh and unmapping it
    when freed; every fresh mapping is paid again in page faults and zeroed pages. Not in a load's main process:
    its heap then kept growing with the file (peak RSS 174 -> 205 MB over 9.8M lines). False where there is no
    glibc mallopt (nothing changes)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, BULK_MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                              BULK_TRIM_THRESHOLD))

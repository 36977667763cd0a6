"""Worker process pools that never outlive their parent, and stop when asked.

A pool worker blocks on its task queue, whose write end it holds itself, so after a `kill -9` of the owner it
would wait forever (and keep its pipes open). Each worker asks the kernel for SIGKILL when its parent dies (Linux
prctl PR_SET_PDEATHSIG: immediate for forked workers) and also watches the owner's pid from a thread (a
forkserver's workers have the server as parent, and the server can outlive the owner). Workers ignore Ctrl-C:
the owner holds it until a safe point (InterruptAtSafePoints) and asks them to stop between units of work.
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


class WorkerPool(ProcessPoolExecutor):
    """A process pool whose workers can be asked to stop between units of work (``request_stop``; a worker's loop
    asks ``stop_requested()``), and which does so when an exception leaves its ``with`` block: a Ctrl-C while the
    replay's workers claim chunk after chunk would otherwise wait for them to replay everything dirty (they ignore
    SIGINT), and a failed load would wait for blocks nobody will commit."""

    def __init__(self, workers: int, ctx, initializer, initargs: tuple) -> None:
        self._stop = ctx.Event()  # inherited by the workers (an initializer argument), whatever the start method
        super().__init__(max_workers=workers, mp_context=ctx, initializer=_start_worker,
                         initargs=(initializer, self._stop, *initargs))
        # A worker that dies with the call queue's pipe full leaves the queue's feeder thread blocked in a write no
        # one reads; a broken pool's cleanup then joins that thread, and so does interpreter exit: it hangs for good
        # (CPython gh-105829, in Python 3.11 releases before its fix, e.g. Debian 12's 3.11.2). Nothing is lost by not
        # joining it: a pool shut down whole has had every item read by the workers that exited.
        self._call_queue.cancel_join_thread()

    def submit(self, fn, /, *args, **kwargs):
        with sigint_blocked():  # the first submit forks the workers: see sigint_blocked
            return super().submit(fn, *args, **kwargs)

    def request_stop(self) -> None:
        """Workers finish the unit they are on and return; safe to call from a signal handler."""
        self._stop.set()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.request_stop()
        self.shutdown(wait=True, cancel_futures=exc_type is not None)
        return False


def pool(workers: int, context: str = "fork", preload: list[str] | None = None, *,
         bulk_memory: bool = False) -> WorkerPool:
    """``bulk_memory``: the workers pass large buffers all the time (keep_freed_memory)."""
    ctx = multiprocessing.get_context(context)
    if preload and context == "forkserver":
        ctx.set_forkserver_preload(preload)
    return WorkerPool(workers, ctx, _bulk_worker if bulk_memory else exit_with_parent, (os.getpid(),))


def run_alone(fn, *args, context: str = "fork", preload: list[str] | None = None, bulk_memory: bool = False):
    """``fn(*args)`` in a worker process of its own (a pool of one, shut down after). For a task tried again after
    a worker died beside it, in a pool now broken: a death here is this task's own doing and takes no other task
    with it. Raises ``BrokenProcessPool`` when the process dies."""
    alone = pool(1, context, preload, bulk_memory=bulk_memory)
    try:
        return alone.submit(fn, *args).result()
    finally:
        alone.shutdown(wait=True)


_stop_event = None  # in a pool worker: its pool's stop request (WorkerPool.request_stop)


def _start_worker(initializer, stop, *initargs) -> None:
    global _stop_event
    _stop_event = stop
    initializer(*initargs)


@contextmanager
def sigint_blocked():
    """SIGINT held pending in this thread while it starts child processes: a Ctrl-C in the moment between a
    child's fork and its ``exit_with_parent`` (which ignores SIGINT, and drops a pending one) would otherwise stop
    the child with a traceback of its own. Here it reaches this process when the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def stop_requested() -> bool:
    """In a pool worker: whether the owner asked its workers to stop (always False elsewhere)."""
    return _stop_event is not None and _stop_event.is_set()


class InterruptAtSafePoints:
    """Hold Ctrl-C (SIGINT) in the main thread until a point where stopping leaves nothing half done.

    A KeyboardInterrupt raised wherever the main thread happens to be can land inside a worker pool's own
    bookkeeping: between ``submit`` registering a task and queueing it, after which the pool's shutdown waits
    forever for a task no worker will see (a CI run's interrupted ingest hung so). Inside this block the first
    SIGINT only records the request and calls ``on_request`` (e.g. a pool's ``request_stop``); ``check()`` at a
    safe point raises KeyboardInterrupt, and so does leaving the block if the request was never checked. A second
    SIGINT raises at once, as Ctrl-C always did. Outside the main thread, or when SIGINT already has a handler of
    its own (the scheduler's), nothing changes."""

    def __init__(self, on_request=None) -> None:
        self.requested = False
        self._on_request = on_request
        self._previous = None

    def __enter__(self) -> "InterruptAtSafePoints":
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self._on_request is not None:
            self._on_request()

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if exc_type is None:
            self.check()


def _bulk_worker(owner_pid: int) -> None:
    exit_with_parent(owner_pid)
    keep_freed_memory()


def exit_with_parent(owner_pid: int) -> None:
    """Pool initializer: leave when the owner process dies. Ctrl-C reaches the whole process group: workers ignore
    it, and the owner stops them in order (otherwise each would print its own KeyboardInterrupt traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # started under sigint_blocked
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

"""CPU seconds of the processes a benchmark run involves (Linux /proc): the benches print them beside wall times,
because on a shared 2-core machine CPU spent is steadier than elapsed time and shows which side a change helped."""
from __future__ import annotations

import os
from pathlib import Path

import psycopg


def process_cpu(pid: int, reaped: bool = False) -> float | None:
    """user + system CPU seconds of a process (Linux /proc), with ``reaped`` those of its children that have exited
    and were waited for; None when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def descendants_cpu(skip: int | None) -> float:
    """CPU seconds of this process's descendants but ``skip`` (the devnet): the poller's decode processes and
    their forkserver, with the children they have reaped. A worker reaped by its parent during the scan may be
    missed or counted twice, so the scan is repeated until two in a row agree (the workers are idle by then)."""
    previous = None
    for _ in range(20):
        total = _descendants_once(skip)
        if previous is not None and abs(total - previous) < 0.015:
            break
        previous = total
    return total


def _descendants_once(skip: int | None) -> float:
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    me, total = os.getpid(), 0.0
    for pid in parents:
        p, chain = pid, []
        while p in parents and p != me and p > 1:
            chain.append(p)
            p = parents[p]
        if p == me and chain and skip not in chain:  # not this process itself (counted on its own)
            total += process_cpu(pid, reaped=True) or 0.0
    return total


def postgres_cpu(url: str) -> float:
    """CPU seconds of every PostgreSQL process of the cluster (backends, WAL writer, checkpointer, …)."""
    with psycopg.connect(url) as c:  # the backend's parent is the postmaster: read while the backend lives
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    # Backends that have exited (the poll's connections) count through the postmaster's reaped total. A backend
    # reaped between reading that total and listing the live ones would be in neither (a poll's loader backend,
    # closed just before: ~2 CPU-s lost in some runs), so the total is read again after, until it held still.
    for _ in range(100):
        reaped = process_cpu(ppid, reaped=True) or 0.0
        live = 0.0
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == ppid:
                        live += process_cpu(int(d.name)) or 0.0
                except (OSError, IndexError, ValueError):
                    pass
        if (process_cpu(ppid, reaped=True) or 0.0) == reaped:
            break
    return reaped + live

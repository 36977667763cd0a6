"""Closing the listening sockets of the tests' hand-made servers."""
from __future__ import annotations

import contextlib
import socket


def close_listener(sock: socket.socket) -> None:
    """Close a listening socket so that a thread blocked in its ``accept()`` returns now (with an ``OSError``).
    On Linux ``close()`` alone leaves that ``accept()`` blocked: its thread lives on, and whoever joins it waits
    out the join's whole timeout. ``shutdown`` wakes it."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()

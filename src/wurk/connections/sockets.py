"""Socket options for connections a thread holds for a long time (``wurk.connections.lease``).

1. ``kernel_timeouts`` lets the kernel time out sends and receives, so a held connection
   can use a blocking socket and still never hang.
"""

from __future__ import annotations

import socket
import struct
import sys
from typing import Any

__all__ = ["kernel_timeouts"]


def kernel_timeouts(sock: Any, seconds: float) -> None:
    """Let the kernel time out a held connection's sends and receives.

    A Python socket with a timeout polls before every send and every receive, releasing
    the GIL around each poll: twice the system calls and GIL hand-offs of a blocking
    socket, on the path every job takes. A blocking socket with ``SO_RCVTIMEO`` /
    ``SO_SNDTIMEO`` still gives up after ``seconds`` (as ``EAGAIN``, which redis-py reports
    as a connection error, as it does a timeout). Plain TCP and Unix sockets on Linux only;
    TLS sockets and other systems keep Python's timeouts.
    """
    if type(sock) is not socket.socket or not sys.platform.startswith("linux") or seconds <= 0:
        return
    whole = int(seconds)
    timeval = struct.pack("@ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    sock.settimeout(None)

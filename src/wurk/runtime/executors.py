"""Helper-thread pools an event loop of wurk's uses, and letting go of their stuck threads.

``concurrent.futures`` joins every pool thread at interpreter exit, with no timeout. A helper
stuck in a blocking call (one ``asyncio.to_thread`` or ``run_in_executor`` was handed, which
no cancellation reaches) would hold its process's exit open for as long as that call, for
ever for one that never returns. ``abandon_running`` takes the pool's threads still running
off that list once their loop has given up waiting for them: they end with the process, as
a processor thread still running after the shutdown grace does. The helpers of wurk's loops
are daemon threads (started from the loop's thread, a daemon), so nothing else waits.
"""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import thread as pool_threads
from typing import Any

__all__ = ["abandon_running"]


def abandon_running(executor: concurrent.futures.ThreadPoolExecutor) -> int:
    """Let the process exit without joining ``executor``'s threads that still run; how many."""
    joined_at_exit: Any = getattr(pool_threads, "_threads_queues", None)
    running = [thread for thread in list(executor._threads) if thread.is_alive()]
    if joined_at_exit is not None:
        for thread in running:
            joined_at_exit.pop(thread, None)
    return len(running)

"""Threads racing a drain: for the lock-free buffers (log lines, metrics)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(work: Callable[[int], None], threads: int, against: Callable[[], None]) -> None:
    """Run ``work(n)`` in ``threads`` threads while ``against()`` is called over and over in
    one more (a flush racing the writers), until every ``work`` has returned."""
    stop = threading.Event()

    def repeat() -> None:
        while not stop.is_set():
            against()

    helper = threading.Thread(target=repeat)
    helper.start()
    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        stop.set()
        helper.join()

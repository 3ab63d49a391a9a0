"""Result waiters run beside a test: a sync wait on its own thread, and whether the server
has its subscribers yet."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import redis

import wurk

# A wait's timeout: the waits of these tests must end long before it.
LONG = 30.0


def subscribed(r: redis.Redis, count: int = 1) -> Callable[[], bool]:
    """Whether ``count`` clients are subscribed (a waiter listens before its job ends)."""
    return lambda: sum(int(c.get("sub", 0)) for c in r.client_list()) >= count


def sync_wait(handle: wurk.ResultHandle[Any]) -> tuple[threading.Thread, list[Any]]:
    """A sync wait in a thread: what it returned or raised, and how long it took."""
    found: list[Any] = []

    def run() -> None:
        started = time.monotonic()
        try:
            found.append(handle.result(timeout=LONG))
        except Exception as exc:  # the test looks at it
            found.append(exc)
        found.append(time.monotonic() - started)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, found

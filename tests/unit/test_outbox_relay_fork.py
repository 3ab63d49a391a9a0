"""The outbox relay in a forked child: the parent's relay thread may be in the middle of a
pass at the fork (it holds the one-pass-at-a-time lock then, through a database query and a
Redis round trip); the child has no such thread, so nothing of that pass may hold the
child's relay up. No server: the store is a stand-in whose pass, in the parent, waits to be
released."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import wurk
from wurk.client.outbox import OutboxRow, Relay

# How long the child gives its pass: one that is not blocked returns at once (the stand-in
# store finds no row in the child), so this only bounds how long the failure takes to show.
CHILD_PASS = 5.0


class HeldInParent:
    """An outbox store whose pass in the test's process waits until ``release``; in any
    other process it finds no row."""

    def __init__(self) -> None:
        self.parent = os.getpid()
        self.inside = threading.Event()
        self.release = threading.Event()

    def relay(self, limit: int, lease: float,
              push: Callable[[list[OutboxRow]], None]) -> int:
        if os.getpid() == self.parent:
            self.inside.set()
            self.release.wait(30)
        return 0

    def pending(self) -> int:
        return 0


def _exit_code(pid: int, timeout: float) -> int | None:
    """The child's exit code; None (and the child killed) when it is still running."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        pause.wait(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def test_a_child_forked_while_the_relay_thread_is_mid_pass_can_relay() -> None:
    config = wurk.Config(redis_url="redis://127.0.0.1:1/0")
    store = HeldInParent()
    relay = Relay(config, store)
    relay.wake()  # a commit woke the relay: its thread starts a pass
    try:
        assert store.inside.wait(10), "the relay thread never started its pass"
        pid = os.fork()
        if pid == 0:  # the child: a pass of its own (a worker's poll, a commit's wake)
            status = 1
            try:
                done = threading.Event()

                def run() -> None:
                    relay.run_once()
                    done.set()

                threading.Thread(target=run, daemon=True).start()
                status = 0 if done.wait(CHILD_PASS) else 2
            finally:
                os._exit(status)
        code = _exit_code(pid, CHILD_PASS + 20)
    finally:
        store.release.set()
        relay.stop(timeout=5)
    assert code == 0, "the child's pass waited on the parent's (a lock held at the fork)"

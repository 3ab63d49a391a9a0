"""Process hooks — what a forked child redoes, what the interpreter's exit runs — registered
by the first object that needs them, never at import: importing wurk changes nothing in the
process (a web app that imports it and never pushes through a reliable writer or an outbox
gets no exit hook of ours).

``install(name, ...)`` registers the hooks of ``name`` once per process; a later call with
the same name does nothing, from any thread (the claim is one ``dict.setdefault``, atomic
under the interpreter lock). A forked child keeps its parent's registrations, as
``os.register_at_fork`` and ``atexit`` do.

``run_exit_hooks()`` runs the exit hooks registered here now, newest first as ``atexit``
would, each once: for a process that ends with ``os._exit`` (a swarm child), which skips
``atexit`` — and with it a reliable writer's last flush (its memory buffer's jobs lost
without a word) and an outbox relay's last pass.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Callable

__all__ = ["install", "installed", "run_exit_hooks"]

log = logging.getLogger("wurk")

_claimed: dict[str, object] = {}
_exit_hooks: list[Callable[[], None]] = []


def install(name: str, *, after_fork_in_child: Callable[[], None] | None = None,
            at_exit: Callable[[], None] | None = None) -> bool:
    """Register ``name``'s hooks unless done before; True when this call registered them."""
    token = object()
    if _claimed.setdefault(name, token) is not token:
        return False
    if after_fork_in_child is not None and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=after_fork_in_child)
    if at_exit is not None:
        atexit.register(at_exit)
        _exit_hooks.append(at_exit)
    return True


def run_exit_hooks() -> None:
    """Run the exit hooks now (newest first), each once: ``atexit`` will not run them
    again. One that raises is logged; the others run."""
    while _exit_hooks:
        hook = _exit_hooks.pop()
        atexit.unregister(hook)
        try:
            hook()
        except Exception as exc:
            log.error("exit hook %s failed: %s", getattr(hook, "__qualname__", hook), exc)


def installed(name: str) -> bool:
    return name in _claimed

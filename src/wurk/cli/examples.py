"""Small example jobs: what ``wurk demo`` pushes, and a module a worker can load.

1. ``add`` and ``greet`` go to the ``default`` queue, ``count_words`` to ``low``: two
   queues, so the demo shows that jobs land per queue.
2. Their wire names are given explicitly, so the payloads stay valid if this module moves
   and a Ruby process can push the same names.
3. Nothing is registered until this module is imported (``wurk demo`` and
   ``wurk -r wurk.cli.examples`` import it; ``import wurk`` does not).
"""

from __future__ import annotations

import logging

from ..job import job

__all__ = ["add", "count_words", "greet"]

log = logging.getLogger("wurk.cli.examples")


@job(name="wurk.cli.examples.add")
def add(a: int, b: int) -> int:
    """Add two numbers."""
    log.info("%d + %d = %d", a, b, a + b)
    return a + b


@job(name="wurk.cli.examples.greet")
def greet(name: str) -> str:
    """Say hello."""
    greeting = f"hello, {name}"
    log.info("%s", greeting)
    return greeting


@job(name="wurk.cli.examples.count_words", queue="low")
def count_words(text: str) -> int:
    """Count the words of ``text``; on the ``low`` queue."""
    count = len(text.split())
    log.info("%d words", count)
    return count

"""How often the garbage collector runs in a worker process.

CPython's cyclic collector runs its youngest generation every 700 container objects
allocated (net of those freed), and every tenth of those the next generation, and so on:
each run walks every object of the generations it collects. A worker holds many objects
alive while it works — a thousand async jobs at once are a thousand tasks, coroutines and
frames — and allocates a few dozen a job that reference counting frees again, so at 700 the
collector runs every few jobs and walks what is alive for nothing: at 1,000 async jobs at
once it was a fifth of the worker's CPU (docs/design.md, "Async jobs: where the CPU goes").

``tune_collector`` therefore raises the first threshold (``gc_threshold``, 10,000 by
default) and freezes what exists when the worker starts (``gc.freeze``: the modules, the
application, the configuration — none of it garbage, all of it walked by every full
collection otherwise). Garbage in reference cycles is still collected, a little later: the
youngest generation holds at most ``gc_threshold`` objects more than before.

Only a process the worker owns is tuned (``wurk worker``, a swarm's children, the framework
commands), never an application that embeds a worker: its collector is the application's
business, as its allocator is (``wurk.runtime.malloc``).
"""

from __future__ import annotations

import gc

__all__ = ["tune_collector"]


def tune_collector(threshold: int | None) -> bool:
    """Freeze what exists now and raise the youngest generation's threshold to
    ``threshold`` (never lower it); False when left alone (``threshold`` is None, or the
    collector is off)."""
    if threshold is None or not gc.isenabled():
        return False
    gc.collect()  # what is garbage now is freed, not frozen with the rest
    gc.freeze()
    first, second, third = gc.get_threshold()
    if threshold > first:
        gc.set_threshold(threshold, second, third)
    return True

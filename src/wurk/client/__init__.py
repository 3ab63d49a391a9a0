"""Pushing jobs: from a payload to Redis (or to the writer a push is handed).

1. ``core``: the ``Client`` — normalise, run client middleware, check arguments, hand the
   entries to a writer.
2. ``writers``: where a push ends — Redis by default; a testing mode, a batch's jobs block
   or a transaction select another for a block of code.
3. ``transactional``: pushes deferred to the surrounding database transaction's commit.
4. ``default``: the process's client, chosen by the configuration; ``wurk.push`` /
   ``wurk.apush``.
"""

__all__: list[str] = []

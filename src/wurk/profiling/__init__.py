"""Job profiling: a job pushed with ``profile="<token>"`` runs under a sampling profiler, and
a successful run's profile is kept in Redis for a day, as Sidekiq 8 keeps Vernier's.

1. ``middleware``: ``JobProfiler``, a built-in server middleware (``wurk.launcher.BUILT_IN``,
   innermost): a job without ``profile`` costs it one dict lookup; one with it runs under
   pyinstrument (the ``profile`` extra) in its own thread, or in its own task for an
   ``async def`` job.
2. ``record``: what a successful run stores — the ``profiles`` sorted set and the
   ``<token>-<jid>`` hash, with the profile as gzip speedscope JSON, capped in size.
3. ``flame``: reading a stored profile back — the gzip inflated within a bound, speedscope's
   JSON (wurk's) or the Firefox Profiler's processed format (Ruby's Vernier) turned into one
   call tree that the dashboard draws as a flame graph.
4. ``firefox``: the upload behind the dashboard's "Open in Firefox Profiler" — a stored
   profile in the Firefox Profiler's format checked and sent to its store, and the token
   the store answers.
"""

from __future__ import annotations

__all__: list[str] = []

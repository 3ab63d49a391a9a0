"""Reaching Redis: where it is, the connections to it, and what its replies mean.

1. ``locate``: which Redis a process uses (``REDIS_URL``, the configuration, or the
   embedded server's home); ``server``: the embedded Valkey server wurk starts for you;
   ``sentinel``: the ``redis+sentinel://`` URL and pools that follow the primary it names;
   ``cluster``: the ``redis+cluster://`` URL and pools that reach the primary of a queue's
   slot; ``hostlist``: the list of hosts both URLs take.
2. ``pool``: bounded, named pools (sync and asyncio) that never replay a write;
   ``packing``: commands in Redis's wire protocol.
3. ``lease``: one connection held by one thread across many commands; ``lending``:
   ``wurk.redis()``, a connection lent to application code; ``sockets``: kernel timeouts.
4. ``replies``: which error replies mean "not now"; ``preflight``: boot checks on the server.
"""

__all__: list[str] = []

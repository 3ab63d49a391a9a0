"""Periodic (cron) jobs, pushed once per tick by an elected leader.

1. ``cron``: schedules as pure functions of time.
2. ``loops``: what is registered (``Loop``, ``Periodic``) and what is due — no Redis.
3. ``leader``: one process per Redis leads, with a fencing token that only grows.
4. ``poller``: the leader's duty that syncs the loops to Redis and pushes each tick.
5. ``cluster``: on Redis Cluster, a tick's run marked, pushed once into its queue's
   keyspace, and settled.
"""

__all__: list[str] = []

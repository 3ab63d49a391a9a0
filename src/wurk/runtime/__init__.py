"""What a wurk process runs on, below the pipeline.

1. ``timer``: periodic duties and the shared thread that runs them; ``outage``: backing off
   and reporting while Redis is unreachable.
2. ``signals``: signals through a self-pipe; ``proctitle``: the title ``ps`` shows.
3. ``malloc`` and ``affinity``: a worker's memory arenas and CPU placement.
4. ``pruning``: the ``processes`` set cleared of processes that are gone.
"""

__all__: list[str] = []

"""Taking jobs off the queues and giving them back: a job leaves Redis only when it ended.

1. ``basic``: the ``Fetcher`` interface, the queue order and Sidekiq's basic fetch.
2. ``reliable``: the default fetch — each job moved into a private in-flight list of this
   process, removed from it by the acknowledgement (the ACK) once the job ended. The ACK is
   ``ReliableFetch.acknowledge``: an ``LREM`` of the job's exact bytes, its reply read with
   the next fetch's; an async job's ACK is sent by its processor's lane in a batch
   (``ack_commands`` / ``settle_acks``, called from ``wurk.asyncjobs``). ``basic`` holds the
   interface every fetcher implements (``UnitOfWork``, ``Fetcher``).
3. ``reaper``: in-flight lists whose owner died go back to their queues.
4. ``poison``: a job that keeps taking its worker down is killed, not requeued again.
5. ``pause``: paused queues, as every fetcher of a process sees them.
"""

__all__: list[str] = []

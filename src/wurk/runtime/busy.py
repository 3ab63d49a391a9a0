"""What a process runs now: the heartbeat's ``<identity>:work`` map, kept by the processors.

A leaf: the processors write it, the heartbeat, the slow-job log and the metrics read it.
"""

from __future__ import annotations

import time

from .. import payload as P

__all__ = ["Busy"]


class Busy:
    """What is running now, by thread id: the heartbeat's ``<identity>:work`` map.

    No lock: each entry is set and popped by the thread (or task) it names, and a snapshot
    copies the map in one step — single dict operations, which CPython makes atomic (the
    free-threaded build locks each dict itself); a job's path takes no lock for it."""

    def __init__(self) -> None:
        self._work: dict[str, tuple[str, bytes, int]] = {}  # decoded only for a snapshot
        # Fields a running job's entry carries beyond Sidekiq's (``stuck_at``: it was told
        # to stop and did not, ``wurk.control``), by thread id; cleared with the entry.
        self._marks: dict[str, dict[str, object]] = {}

    def add(self, thread_id: str, queue: str, raw: bytes) -> None:
        self._work[thread_id] = (queue, raw, int(time.time()))

    def remove(self, thread_id: str) -> None:
        self._work.pop(thread_id, None)
        if self._marks:
            self._marks.pop(thread_id, None)

    def payload_of(self, thread_id: str) -> bytes | None:
        """The payload of the job ``thread_id`` runs now, as fetched; None when it runs none."""
        entry = self._work.get(thread_id)
        return entry[1] if entry is not None else None

    def mark(self, thread_id: str, **fields: object) -> None:
        """Add fields to a running job's entry (until it is removed)."""
        if thread_id in self._work:
            self._marks[thread_id] = {**self._marks.get(thread_id, {}), **fields}

    def marked(self) -> int:
        """How many running jobs carry marks (jobs stuck past their stop, for the metrics)."""
        return len(self._marks)

    def snapshot(self) -> dict[str, str]:
        """tid → the JSON value Sidekiq's Busy page reads."""
        items = list(self._work.items())
        marks = dict(self._marks)
        return {t: P.dumps({"queue": q, "payload": raw.decode("utf-8", "replace"),
                            "run_at": run_at, **marks.get(t, {})})
                for t, (q, raw, run_at) in items}

    def __len__(self) -> int:
        return len(self._work)

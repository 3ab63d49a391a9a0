"""Execution metrics made by hand for the tests: a tracker that saw given executions."""

from __future__ import annotations

from wurk.metrics import ExecutionTracker


def tracked(**jobs: tuple[list[float], int]) -> ExecutionTracker:
    """A tracker that saw, per job, these successful times (ms) and this many failures."""
    tracker = ExecutionTracker()
    for name, (times, failures) in jobs.items():
        for ms in times:
            tracker.succeeded(name, ms)
        for _ in range(failures):
            tracker.failed(name)
    return tracker

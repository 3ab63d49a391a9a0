"""Execution metrics, data-compatible with Sidekiq 8's Metrics page.

1. ``tracking``: the server middleware and the in-memory tracker a worker flushes on every
   heartbeat (and at exit) into Sidekiq 8's keys.
2. ``query``: reading them back for the dashboard, the JSON API and Prometheus.

``wurk.deploy.mark(label)`` draws a deploy line across the charts.
"""

from __future__ import annotations

from .query import JobResult, Mark, Query, Result
from .tracking import (
    BUCKET_BOUNDS,
    BUCKET_LABELS,
    ExecutionMetrics,
    ExecutionTracker,
    Observer,
    bucket_of,
    job_name,
)

__all__ = [
    "BUCKET_BOUNDS",
    "BUCKET_LABELS",
    "ExecutionMetrics",
    "ExecutionTracker",
    "JobResult",
    "Mark",
    "Observer",
    "Query",
    "Result",
    "bucket_of",
    "job_name",
]

"""The History tab: the cluster's numbers over time, as the history sampler kept them.

1. ``/history``: per sample (every ``history_interval`` s, kept ``retain_history`` s) the
   jobs processed and failed since the previous sample, the enqueued / busy / retry / dead /
   scheduled counts, the ``default`` queue's latency and the five largest queues' sizes,
   over 1 h, 8 h, 24 h or 72 h. A long period is thinned to ``POINTS`` samples before it is
   drawn (counters are differenced over the kept samples, so totals stay right).
2. Registered by default as an ``Extension``; samples are checked as they are read
   (``wurk.metrics.history.read_history``).
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

from babel.support import NullTranslations
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..config import Config
from ..metrics.history import Sample, read_history
from . import charts
from .context import dashboard
from .extensions import Extension
from .i18n import DEFAULT, N_, request_locale, translations
from .templating import render

__all__ = ["PERIODS", "extension", "timeline"]

PERIODS = {"1h": 3600, "8h": 8 * 3600, "24h": 24 * 3600, "72h": 72 * 3600}
DEFAULT_PERIOD = "1h"
POINTS = 240  # the most samples a chart draws: about two per pixel column on a laptop
QUEUES_CHARTED = 5


def _thin(samples: list[Sample]) -> list[Sample]:
    if len(samples) <= POINTS:
        return samples
    step = -(-len(samples) // POINTS)
    kept = samples[::step]
    return kept if kept[-1] is samples[-1] else [*kept, samples[-1]]


def _increase(samples: list[Sample], name: str) -> list[int]:
    """What a counter rose by since the sample before (0 after a reset)."""
    values = [sample.get(name) for sample in samples]
    return [0, *(max(int(b - a), 0) for a, b in itertools.pairwise(values))] \
        if values else []


def timeline(config: Config, period: str,
             words: NullTranslations | None = None) -> dict[str, Any]:
    """The charts of ``period``; their fixed labels in ``words``' language (queue names
    are names, as stored)."""
    words = words if words is not None else translations(DEFAULT)
    samples = _thin(read_history(config, PERIODS[period]))
    labels = [dt.datetime.fromtimestamp(s.at, dt.timezone.utc).strftime("%H:%M")
              for s in samples]

    def gauge(name: str) -> list[int]:
        return [int(s.get(name)) for s in samples]

    biggest: dict[str, float] = {}
    for sample in samples:
        for queue, size in sample.queues.items():
            biggest[queue] = max(biggest.get(queue, 0.0), size)
    queues = sorted(biggest, key=lambda q: (-biggest[q], q))[:QUEUES_CHARTED]
    return {
        "period": period, "samples": len(samples), "retain": config.retain_history,
        "interval": config.history_interval,
        "throughput": charts.line_chart(labels, [
            ("processed", words.gettext("Processed"), _increase(samples, "processed")),
            ("failed", words.gettext("Failed"), _increase(samples, "failed"))]),
        "load": charts.line_chart(labels, [("s0", words.gettext("Enqueued"), gauge("enqueued")),
                                           ("s1", words.gettext("Busy"), gauge("busy"))]),
        "sets": charts.line_chart(labels, [("s2", words.gettext("Retries"), gauge("retries")),
                                           ("s3", words.gettext("Dead"), gauge("dead")),
                                           ("s4", words.gettext("Scheduled"), gauge("scheduled"))]),
        "latency": charts.line_chart(labels, [
            ("s0", "default", [round(s.latency.get("default", 0.0)) for s in samples])]),
        "queues": charts.line_chart(labels, [
            (f"s{i}", queue, [int(s.queues.get(queue, 0)) for s in samples])
            for i, queue in enumerate(queues)]),
    }


async def page(request: Request) -> Response:
    dash = dashboard(request)
    period = request.query_params.get("period")
    period = period if period in PERIODS else DEFAULT_PERIOD
    found = await dash.run(timeline, dash.config, period, translations(request_locale(request)))
    return render(request, "history.html", {"h": found, "periods": list(PERIODS)})


def extension() -> Extension:
    return Extension(name="history", tab=N_("History"), routes=[Route("/", page, methods=["GET"])])

"""The Metrics tab: every job's executions over a period, and a page per job.

1. ``/metrics`` (and ``/metrics/``): a table of jobs — executions, failures, total and mean
   time — sortable by any column and filtered by a name substring, over 1 h, 2 h, 4 h, 8 h
   (minute buckets) or 24 h, 48 h, 72 h (ten-minute buckets), under a chart of the busiest
   jobs with deploy marks. The same URL answers a Prometheus scraper (an ``Accept`` without
   ``text/html``) with the cluster's figures (``wurk.metrics.prometheus``).
2. ``/metrics/<job>``: that job's executions and failures, its mean time per bucket, and its
   latency histogram (minute periods only: histograms live 8 h), with deploy marks.
3. Registered by default as an ``Extension``; what it reads is checked by
   ``wurk.metrics.query`` through ``wurk.api.values``: a stored value that cannot be read
   counts 0 and the page says how many there were, with the first few; every name shown is
   escaped.
4. The JSON twins (``overview_data``, ``job_data``; served by ``wurk.web.api`` at
   ``/api/metrics`` and ``/api/metrics/<job>``): the same numbers, with the same query
   parameters, as data rather than charts — per bucket where the page draws a chart.
"""

from __future__ import annotations

from typing import Any

from babel.support import NullTranslations
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ..config import Config
from ..errors import ConfigError
from ..metrics import BUCKET_LABELS, JobResult, Query, Result
from ..metrics.prometheus import cluster_exposition
from . import charts
from .context import dashboard
from .extensions import Extension
from .i18n import DEFAULT, N_, request_locale, translations
from .templating import render
from .views import name_of

__all__ = ["PERIODS", "extension", "job_data", "job_detail", "overview", "overview_data",
           "read_job", "read_overview", "root"]

# The periods Sidekiq's page offers: (minutes, hours) for wurk.metrics.Query.
PERIODS: dict[str, tuple[int | None, int | None]] = {
    "1h": (60, None), "2h": (120, None), "4h": (240, None), "8h": (480, None),
    "24h": (None, 24), "48h": (None, 48), "72h": (None, 72),
}
DEFAULT_PERIOD = "1h"
SORTS = ("name", "processed", "failed", "total_ms", "average_ms")
# A filter longer than any job name is cut; the table shows at most ROW_LIMIT jobs (anyone
# can write fields into the metrics keys, a page must stay bounded).
FILTER_LIMIT = 100
ROW_LIMIT = 1000
CHARTED = 5  # jobs drawn on the overview chart, the busiest first


def period_of(value: str | None) -> str:
    return value if value in PERIODS else DEFAULT_PERIOD


def _marks(result: Result) -> list[tuple[float, str]]:
    """Each deploy mark as a fractional bucket index."""
    width = (result.ends_at - result.starts_at).total_seconds() / len(result.buckets)
    return [((mark.at - result.starts_at).total_seconds() / width, mark.label)
            for mark in result.marks]


def _top(config: Config, period: str, substr: str, sort: str, descending: bool
         ) -> tuple[Result, list[dict[str, Any]], str, list[JobResult]]:
    """(the query's result, its rows sorted as asked, the sort column, the busiest jobs)."""
    minutes, hours = PERIODS[period]
    result = Query(config).top_jobs(minutes=minutes, hours=hours, class_filter=substr or None)
    rows = [job.to_dict() for job in result.jobs.values()]
    key = sort if sort in SORTS else "processed"
    rows.sort(key=lambda row: (row[key], row["name"]), reverse=descending)
    busiest = sorted(result.jobs.values(), key=lambda j: (-j.total_processed, j.name))[:CHARTED]
    return result, rows, key, busiest


def overview(config: Config, period: str, substr: str = "", sort: str = "processed",
             descending: bool = True) -> dict[str, Any]:
    result, rows, key, busiest = _top(config, period, substr, sort, descending)
    chart = charts.line_chart(result.labels(), [(f"s{i}", job.name, job.processed)
                                                for i, job in enumerate(busiest)])
    charts.with_marks(chart, len(result.buckets), _marks(result))
    for row in rows:
        del row["series"], row["histogram"]
    return {"period": period, "granularity": result.granularity, "jobs": rows[:ROW_LIMIT],
            "invalid": result.invalid, "invalid_count": result.invalid_count,
            "total_jobs": len(rows), "substr": substr, "sort": key, "descending": descending,
            "chart": chart, "marks": [(m.at.isoformat(), m.label) for m in result.marks]}


def job_detail(config: Config, name: str, period: str,
               words: NullTranslations | None = None) -> dict[str, Any]:
    """One job's charts; their fixed labels in ``words``' language."""
    words = words if words is not None else translations(DEFAULT)
    minutes, hours = PERIODS[period]
    result = Query(config).for_job(name, minutes=minutes, hours=hours)
    job = result.jobs[name]
    marks = _marks(result)
    counts = charts.line_chart(result.labels(), [("processed", words.gettext("Executions"),
                                                  job.processed),
                                                 ("failed", words.gettext("Failures"), job.failed)])
    charts.with_marks(counts, len(result.buckets), marks)
    average = [round(ms) for ms in job.average_series()]
    times = charts.line_chart(result.labels(), [("processed", words.gettext("Mean ms"), average)])
    charts.with_marks(times, len(result.buckets), marks)
    histogram = None
    if job.histogram is not None:
        histogram = charts.bar_chart(BUCKET_LABELS, job.histogram)
    return {"name": name, "period": period, "granularity": result.granularity,
            "job": {k: v for k, v in job.to_dict().items() if k != "series"},
            "counts": counts, "times": times, "histogram": histogram,
            "invalid": result.invalid, "invalid_count": result.invalid_count,
            "marks": [(m.at.isoformat(), m.label) for m in result.marks]}


# -- the JSON twins ---------------------------------------------------------------------------
def _period_data(result: Result, period: str) -> dict[str, Any]:
    """What every metrics document starts with: the period, its buckets (each one's start,
    UTC, oldest first), the deploy marks and the values that could not be read (``null``
    in the answer, their raw text under its ``"invalid"`` object)."""
    return {"period": period, "granularity": result.granularity,
            "starts_at": result.starts_at.isoformat(), "ends_at": result.ends_at.isoformat(),
            "buckets": [bucket.isoformat() for bucket in result.buckets],
            "marks": [{"at": m.at.isoformat(), "label": m.label} for m in result.marks],
            "invalid_count": result.invalid_count, "invalid_values": list(result.invalid)}


def overview_data(config: Config, period: str, substr: str = "", sort: str = "processed",
                  descending: bool = True) -> dict[str, Any]:
    """The Metrics page as data: every job's executions, failures, total and mean ms over
    the period (sorted and filtered as the page is, at most ``ROW_LIMIT``), and the busiest
    jobs' executions per bucket (what the page charts)."""
    result, rows, key, busiest = _top(config, period, substr, sort, descending)
    jobs = [{name: row[name] for name in SORTS} for row in rows[:ROW_LIMIT]]
    return {**_period_data(result, period), "substr": substr, "sort": key,
            "descending": descending, "total_jobs": len(rows), "jobs": jobs,
            "busiest": [{"name": job.name, "processed": job.processed} for job in busiest]}


def job_data(config: Config, name: str, period: str) -> dict[str, Any]:
    """A job's metrics page as data: its totals, its executions, failures, ms and mean ms
    per bucket, and its latency histogram (``null`` past 8 h: histograms are kept 8 h)."""
    result = Query(config).for_job(name, minutes=PERIODS[period][0], hours=PERIODS[period][1])
    job = result.jobs[name]
    summary = job.to_dict()
    histogram = None
    if job.histogram is not None:
        histogram = [{"bucket": label, "count": count}
                     for label, count in zip(BUCKET_LABELS, job.histogram, strict=True)]
    return {**_period_data(result, period), "name": name,
            **{field: summary[field] for field in SORTS if field != "name"},
            "series": {"processed": job.processed, "failed": job.failed, "ms": job.ms,
                       "average_ms": [round(ms, 3) for ms in job.average_series()]},
            "histogram": histogram}


async def read_overview(request: Request) -> dict[str, Any]:
    """What a request for the Metrics page (or its JSON twin) asks to see."""
    dash = dashboard(request)
    params = request.query_params
    period = period_of(params.get("period"))
    substr = params.get("substr", "").strip()[:FILTER_LIMIT]
    sort = params.get("sort") or "processed"
    found: dict[str, Any] = await dash.run(overview_data, dash.config, period, substr,
                                           sort if sort in SORTS else "processed",
                                           params.get("direction") != "asc")
    return found


async def read_job(request: Request) -> dict[str, Any]:
    """What a request for a job's metrics page (or its JSON twin) asks to see."""
    dash = dashboard(request)
    period = period_of(request.query_params.get("period"))
    found: dict[str, Any] = await dash.run(job_data, dash.config, request.path_params["name"],
                                           period)
    return found


# -- handlers ---------------------------------------------------------------------------------
def wants_page(request: Request) -> bool:
    """A browser asks for HTML; a Prometheus scraper (or curl) does not."""
    return "text/html" in request.headers.get("accept", "")


async def root(request: Request) -> Response:
    """``GET /metrics``: the page for a browser, the exposition for a scraper."""
    if wants_page(request):
        return await index(request)
    dash = dashboard(request)
    try:
        body, content_type = await dash.run(cluster_exposition, dash.config,
                                            request.headers.get("accept", ""))
    except ConfigError as exc:
        return PlainTextResponse(str(exc), 501)
    return Response(body, media_type=content_type)


async def index(request: Request) -> Response:
    dash = dashboard(request)
    params = request.query_params
    period = period_of(params.get("period"))
    substr = params.get("substr", "").strip()[:FILTER_LIMIT]
    sort = params.get("sort") if params.get("sort") in SORTS else "processed"
    descending = params.get("direction") != "asc"
    found = await dash.run(overview, dash.config, period, substr, sort or "processed",
                           descending)
    return render(request, "metrics.html", {"m": found, "periods": list(PERIODS)})


async def job_page(request: Request) -> Response:
    dash = dashboard(request)
    period = period_of(request.query_params.get("period"))
    name = await name_of(request, "metrics")
    found = await dash.run(job_detail, dash.config, name, period,
                           translations(request_locale(request)))
    return render(request, "metrics_job.html", {"j": found, "periods": list(PERIODS)})


def extension() -> Extension:
    """The built-in Metrics tab (``/metrics`` itself is ``root``, routed by the app)."""
    return Extension(name="metrics", tab=N_("Metrics"),
                     routes=[Route("/", index, methods=["GET"]),
                             # A job class "." or "..": a browser resolves it away in a path.
                             Route("/-/job", job_page, methods=["GET"]),
                             Route("/{name:path}", job_page, methods=["GET"])])

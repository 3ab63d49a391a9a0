"""OpenTelemetry tracing (``wurk[otel]``): a job's span is a child of the span that pushed it.

1. ``TracingClient`` (client middleware) opens a ``PRODUCER`` span ``<job> publish`` around
   each push and writes its W3C trace context into the payload's ``traceparent`` (and
   ``tracestate``) fields — the fields OpenTelemetry's Ruby Sidekiq instrumentation uses, so
   a trace crosses between Ruby and Python either way.
2. ``TracingServer`` (server middleware) reads that context back and runs the job inside a
   ``CONSUMER`` span ``<job> process`` parented on it; an exception is recorded on the span
   and sets its status to error, then goes on to the retry machinery unchanged.
3. Span attributes: ``messaging.system`` = ``wurk``, ``messaging.destination.name`` (the
   queue), ``messaging.message.id`` (the jid, left out when it is longer than 200
   characters or no UTF-8), ``messaging.operation.type``, ``wurk.job``,
   and on the job's span ``wurk.retry_count`` (a stored one that is no count a signed
   64-bit integer holds is left out) and ``wurk.enqueued_at``.
4. ``instrument(config)`` adds both. Spans go to whatever tracer provider the application set
   up (the global one unless one is passed). A stored ``traceparent`` that is not valid is
   ignored: the job then starts a new trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    from opentelemetry import trace
except ImportError as exc:  # as wurk.tui says it: the extra to install, not a bare name
    raise ImportError(f"wurk.otel needs the otel extra ({exc.name} is missing): "
                      "pip install 'wurk[otel]'", name=exc.name) from exc
from opentelemetry.trace import SpanKind, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import payload as P
from ._version import __version__
from .config import Config
from .metrics.tracking import NAME_LIMIT, job_name

__all__ = ["TracingClient", "TracingServer", "instrument"]

_W3C = TraceContextTextMapPropagator()
_CONTEXT_FIELDS = (P.TRACEPARENT, P.TRACESTATE)
SYSTEM = "wurk"


def _tracer(provider: TracerProvider | None) -> trace.Tracer:
    return trace.get_tracer("wurk", __version__, tracer_provider=provider)


def _attributes(payload: P.Payload, queue: str, operation: str) -> dict[str, Any]:
    found: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.destination.name": queue,
        "messaging.operation.type": operation, "wurk.job": job_name(payload),
    }
    jid = payload.get(P.JID)
    if isinstance(jid, str) and _carried(jid):
        found["messaging.message.id"] = jid
    return found


def _carried(text: str) -> bool:
    """Whether a stored text can go on a span as it is: at most ``NAME_LIMIT`` characters,
    UTF-8 (a megabyte-long jid made a span past what a collector takes, a lone surrogate
    one a span protobuf cannot encode; either failed its whole batch's export)."""
    if len(text) > NAME_LIMIT:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class TracingClient:
    """Client middleware: a producer span per push, its context stored in the payload."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = _tracer(tracer_provider)

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        with self.tracer.start_as_current_span(
                f"{job_name(payload)} publish", kind=SpanKind.PRODUCER,
                attributes=_attributes(payload, queue, "send")):
            carrier: dict[str, str] = {}
            _W3C.inject(carrier)
            for name in _CONTEXT_FIELDS:
                if name in carrier:
                    payload[name] = carrier[name]
            return call_next()


class TracingServer:
    """Server middleware: the job's span, a child of the span that pushed it."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = _tracer(tracer_provider)

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        carrier = {name: value for name in _CONTEXT_FIELDS
                   if isinstance(value := payload.get(name), str)}
        attributes = _attributes(payload, queue, "process")
        retry_count = payload.get(P.RETRY_COUNT)
        # An attribute's integer is a signed 64-bit one (OpenTelemetry's rule; OTLP cannot
        # encode a larger one, and a span it cannot encode fails its whole batch's export).
        if isinstance(retry_count, int) and not isinstance(retry_count, bool) \
                and 0 <= retry_count < 2**63:
            attributes["wurk.retry_count"] = retry_count
        enqueued = P.read_time(payload.get(P.ENQUEUED_AT))
        if enqueued is not None:
            attributes["wurk.enqueued_at"] = enqueued
        with self.tracer.start_as_current_span(
                f"{job_name(payload)} process", context=_W3C.extract(carrier),
                kind=SpanKind.CONSUMER, attributes=attributes, record_exception=True,
                set_status_on_exception=True):
            return call_next()


def instrument(config: Config, tracer_provider: TracerProvider | None = None) -> None:
    """Trace every push and every execution of ``config`` (before the worker starts)."""
    config.client_middleware.add(TracingClient(tracer_provider))
    config.server_middleware.add(TracingServer(tracer_provider))

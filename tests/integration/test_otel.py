"""OpenTelemetry: the push span and the job span linked through the payload, in one process
with a real worker (embedded) and the SDK's in-memory exporter."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import wurk
from tests.helpers.server import Server
from wurk import otel
from wurk.api import Queue


@pytest.fixture
def traced(redis_server: Server) -> Iterator[tuple[wurk.Config, InMemorySpanExporter,
                                                   TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.2,
                            fetch_timeout=0.2, timeout=1, concurrency=2, retain_history=0)
    otel.instrument(config, provider)
    wurk.job(name="Otel::Ok")(lambda n: None)

    def boom(n: int) -> None:
        raise RuntimeError(f"boom {n}")

    wurk.job(name="Otel::Boom", retry=False)(boom)
    yield config, exporter, provider
    for name in ("Otel::Ok", "Otel::Boom"):
        wurk.registry.unregister(name)


def spans_named(exporter: InMemorySpanExporter, name: str, timeout: float = 10) -> list[Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [s for s in exporter.get_finished_spans() if s.name == name]
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"no span {name!r}: {[s.name for s in exporter.get_finished_spans()]}")


def test_the_job_span_is_a_child_of_the_push_span(traced: Any) -> None:
    config, exporter, provider = traced
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        jid = wurk.push({"class": "Otel::Ok", "args": [1]})
    stored = Queue("default", config).page(0, 1)[0].item
    assert stored["traceparent"].split("-")[1] == format(request.get_span_context().trace_id,
                                                          "032x")
    with wurk.InProcessWorker(config):
        job = spans_named(exporter, "Otel::Ok process")[0]
    push = spans_named(exporter, "Otel::Ok publish")[0]
    assert push.kind == SpanKind.PRODUCER and job.kind == SpanKind.CONSUMER
    assert push.parent.span_id == request.get_span_context().span_id
    assert job.parent is not None and job.parent.span_id == push.context.span_id
    assert job.context.trace_id == push.context.trace_id == request.get_span_context().trace_id
    assert job.attributes["messaging.system"] == "wurk"
    assert job.attributes["messaging.destination.name"] == "default"
    assert job.attributes["messaging.message.id"] == jid
    assert job.attributes["wurk.job"] == "Otel::Ok"
    assert job.status.status_code != StatusCode.ERROR


def test_an_error_is_recorded_on_the_job_span(traced: Any) -> None:
    config, exporter, _ = traced
    wurk.push({"class": "Otel::Boom", "args": [2], "retry_count": 4})
    with wurk.InProcessWorker(config):
        job = spans_named(exporter, "Otel::Boom process")[0]
    assert job.status.status_code == StatusCode.ERROR
    assert [e.name for e in job.events] == ["exception"]
    assert job.events[0].attributes["exception.message"] == "boom 2"
    assert job.attributes["wurk.retry_count"] == 4


def test_a_bad_stored_traceparent_starts_a_new_trace(traced: Any) -> None:
    config, exporter, _ = traced
    config.client_middleware.clear()  # pushed as by a client that writes junk
    wurk.push({"class": "Otel::Ok", "args": [3], "traceparent": "00-zz-<script>-01",
               "tracestate": 7})
    with wurk.InProcessWorker(config):
        job = spans_named(exporter, "Otel::Ok process")[0]
    assert job.parent is None


@pytest.mark.parametrize("stored", [2**64, 10**30, -1])
def test_a_retry_count_no_attribute_can_carry_is_left_out(stored: int) -> None:
    """An attribute's integer is a signed 64-bit one: a stored ``retry_count`` past it went
    onto the span as it was, and OTLP, unable to encode it, failed the export of every span
    in its batch. One that is no count is left out; the span is otherwise whole."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = otel.TracingServer(provider)
    payload = {"class": "Otel::Ok", "jid": "a" * 24, "retry_count": stored}
    assert server(None, payload, "default", lambda: "done") == "done"
    (span,) = exporter.get_finished_spans()
    assert "wurk.retry_count" not in (span.attributes or {})
    assert (span.attributes or {})["wurk.job"] == "Otel::Ok"


@pytest.mark.parametrize("jid", ["j" * 1_000_000, "abc\ud800def"])
def test_a_jid_no_attribute_should_carry_is_left_out(jid: str) -> None:
    """A stored jid went onto the job's span whole: a megabyte-long one (anyone's to write)
    made a span past what an OTLP collector takes (4 MB a request), a lone surrogate one a
    span protobuf cannot encode — either failed the export of every span in its batch.
    Such a jid is left out, as a bad ``retry_count`` is; the span is otherwise whole."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = otel.TracingServer(provider)
    payload = {"class": "Otel::Ok", "jid": jid, "retry_count": 1}
    assert server(None, payload, "default", lambda: "done") == "done"
    (span,) = exporter.get_finished_spans()
    attributes = span.attributes or {}
    assert "messaging.message.id" not in attributes
    assert attributes["wurk.job"] == "Otel::Ok" and attributes["wurk.retry_count"] == 1


def test_without_opentelemetry_the_import_names_the_extra() -> None:
    """``import wurk.otel`` without the package raised a bare ModuleNotFoundError; the TUI's
    import names its extra, and so does this one now."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "try:\n    import wurk.otel\nexcept ImportError as exc:\n    print(exc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert "wurk.otel needs the otel extra" in out and "pip install 'wurk[otel]'" in out

"""OpenTelemetry spans: a tracer each app owns, and ``traceparent`` for upstreams.

No global tracer provider is set: an app gets its own (or the no-op tracer,
when no exporter is configured), so several apps in one process never share
spans. The SDK and the OTLP exporter are imported only when spans are
recorded: a server without them starts as fast as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from stead.config import Settings
from stead.telemetry.logs import REQUEST_ID

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("stead.telemetry")
OTLP_PACKAGE = "opentelemetry-exporter-otlp-proto-http"
SCOPE = "stead"
"""The tracer's name, and the service's unless OTEL_SERVICE_NAME names it."""
SERVICE_NAME = "service.name"


BATCH_VARIABLES = {
    "max_queue_size": "OTEL_BSP_MAX_QUEUE_SIZE",
    "max_export_batch_size": "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "schedule_delay_millis": "OTEL_BSP_SCHEDULE_DELAY",
    "export_timeout_millis": "OTEL_BSP_EXPORT_TIMEOUT",
}
"""The batch processor's parameters, by the variable each is read from."""


SHUTDOWN_SECONDS = 2.0
"""Longest a stop waits for the spans not yet exported."""


class TracingSettingError(ValueError):
    """An ``OTEL_*`` value the OpenTelemetry SDK refuses: start-up stops with one line."""


@dataclass(frozen=True)
class Tracing:
    tracer: trace.Tracer
    provider: TracerProvider | None = None
    """The SDK provider this app owns (flushed at shutdown); None: spans are not recorded."""

    @contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[trace.Span]:
        """A child of the current span (a root one outside any), ended on exit;
        an exception marks it as an error and propagates."""
        with self.tracer.start_as_current_span(name, attributes=attributes) as span:
            yield span

    def shutdown(self, seconds: float = SHUTDOWN_SECONDS) -> None:
        """Sends the spans not yet exported, waiting ``seconds`` at most: a
        collector that takes the connection and never answers would hold the
        stop for the exporter's whole timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``,
        10 s by default, each retry more). What is not sent by then is dropped."""
        if self.provider is None:
            return
        # The SDK's shutdown takes no bound (its flush ignores the one it is
        # given): it runs in a thread of its own, left to the process's exit.
        flushing = threading.Thread(target=self.provider.shutdown, name="stead-spans", daemon=True)
        flushing.start()
        flushing.join(seconds)
        if flushing.is_alive():
            log.warning(
                "spans not exported within %gs of stopping were dropped: the collector "
                "did not answer",
                seconds,
            )


def open_tracing(settings: Settings, exporter: SpanExporter | None = None) -> Tracing:
    """Spans exported to ``exporter`` (synchronously: for tests), else by OTLP
    when ``settings.otlp_endpoint`` is set, else not recorded.
    ``TracingSettingError``: an ``OTEL_*`` variable the SDK refuses."""
    if exporter is None and settings.otlp_endpoint is None:
        return Tracing(trace.NoOpTracer())
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES itself;
    # attributes given to it would override them, so stead's name is only the default.
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: SCOPE}))
    provider = TracerProvider(resource=resource)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning(
                "OTEL_EXPORTER_OTLP_ENDPOINT is set but %s is not installed: no spans are "
                "exported (install it, or stead[otlp])",
                OTLP_PACKAGE,
            )
            return Tracing(trace.NoOpTracer())
        # The exporter reads the endpoint, headers and timeout from OTEL_EXPORTER_OTLP_*,
        # the processor its queue and batch sizes from OTEL_BSP_*.
        try:
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        except ValueError as exc:
            raise TracingSettingError(_setting_error(str(exc))) from None
    return Tracing(provider.get_tracer(SCOPE), provider)


def _setting_error(message: str) -> str:
    """The SDK's refusal, naming the variable it read (it names its parameter)."""
    for parameter, variable in BATCH_VARIABLES.items():
        if message.startswith(parameter):
            return f"{variable}: {message}"
    return f"OTEL_BSP_* or OTEL_EXPORTER_OTLP_*: {message}"


@contextmanager
def detached() -> Iterator[None]:
    """The block runs outside the span and the request its task was started in.
    A task inherits its starter's context: work a request starts that outlives
    it (a session's actor and every turn it runs) would otherwise be traced
    beneath that one request, and its log lines carry that request's id,
    however many later requests queued its turns."""
    token = otel_context.attach(otel_context.Context())
    request = REQUEST_ID.set(None)
    try:
        yield
    finally:
        REQUEST_ID.reset(request)
        otel_context.detach(token)


def trace_headers(into: Mapping[str, str] | None = None) -> dict[str, str]:
    """``into`` plus the W3C ``traceparent`` (and ``tracestate``) of the current
    span, for a request to an upstream; unchanged outside a recorded span."""
    carrier = dict(into or {})
    TraceContextTextMapPropagator().inject(carrier)
    return carrier

"""The telemetry room: Prometheus metrics, OpenTelemetry spans and the log's
format. Imports nothing of stead but its settings; every room may use it."""

from stead.telemetry.logs import FIELDS, configure_logging, serving_request
from stead.telemetry.metrics import CONTENT_TYPE, Metrics
from stead.telemetry.telemetry import ModelCall, Telemetry, ToolCall
from stead.telemetry.tracing import (
    Tracing,
    TracingSettingError,
    detached,
    open_tracing,
    trace_headers,
)

__all__ = [
    "CONTENT_TYPE",
    "FIELDS",
    "Metrics",
    "ModelCall",
    "Telemetry",
    "ToolCall",
    "Tracing",
    "TracingSettingError",
    "configure_logging",
    "detached",
    "open_tracing",
    "serving_request",
    "trace_headers",
]

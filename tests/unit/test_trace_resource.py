"""The service name spans are exported under: OTEL_SERVICE_NAME (or
``service.name`` in OTEL_RESOURCE_ATTRIBUTES) as the operator set it, else
``stead``. Before, ``stead`` overrode both, so every brain exported as one."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stead.config import Settings
from stead.telemetry import open_tracing


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({}, "stead"),
        ({"OTEL_SERVICE_NAME": "brain-a"}, "brain-a"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=brain-b,region=x"}, "brain-b"),
    ],
)
def test_spans_carry_the_service_name_the_operator_set(
    env: dict[str, str], name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    exporter = InMemorySpanExporter()
    tracing = open_tracing(Settings(data_dir=tmp_path), exporter)
    with tracing.span("request"):
        pass
    tracing.shutdown()
    (span,) = exporter.get_finished_spans()
    assert span.resource.attributes["service.name"] == name

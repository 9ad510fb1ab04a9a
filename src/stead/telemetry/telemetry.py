"""``Telemetry``: metrics, spans and log lines for the agent loop, in one call each.

The runtime says what happened (a turn ended, a model or tool call is made,
a sandbox is acquired); this module decides which series, span and log line
that becomes. It logs ids, names, outcomes and durations only: never a tool's
input or output, a model's text, or a secret.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from opentelemetry.trace import NoOpTracer, Span, Status, StatusCode

from stead.telemetry.logs import FIELDS
from stead.telemetry.metrics import Metrics
from stead.telemetry.tracing import Tracing

log = logging.getLogger("stead.turns")
OK = "ok"
ERROR = "error"
UNAVAILABLE = "unavailable"
CANCELLED = "cancelled"
"""The outcome of a call the turn stopped before it ended (an interrupt, a lost
lease, a shutdown): neither answered nor failed."""


@dataclass
class ModelCall:
    """What a model call's caller reports back: the tokens the answer used."""

    model: str
    """The model's series label (``Metrics.model_label``)."""
    metrics: Metrics
    span: Span

    def answered(self, usage: Mapping[str, int]) -> None:
        self.metrics.count_tokens(self.model, usage)
        for kind, value in usage.items():
            self.span.set_attribute(f"gen_ai.usage.{kind}", value)


@dataclass
class ToolCall:
    """What a tool call's caller reports back: whether the tool failed, or
    could not run at all (what runs it did not answer)."""

    outcome: str = OK

    def finished(self, *, is_error: bool, reached: bool = True) -> None:
        self.outcome = UNAVAILABLE if not reached else ERROR if is_error else OK


@dataclass(frozen=True)
class Telemetry:
    """One per app (``open_telemetry``); the default records metrics on a
    registry of its own and no spans."""

    metrics: Metrics = field(default_factory=Metrics)
    tracing: Tracing = field(default_factory=lambda: Tracing(NoOpTracer()))

    @contextmanager
    def turn(self, session_id: str, run_id: str, attempt: int) -> Iterator[None]:
        with self.tracing.span(
            "turn", **{"stead.session_id": session_id, "stead.run_id": run_id, "attempt": attempt}
        ):
            yield

    def turn_ended(self, session_id: str, run_id: str, outcome: str) -> None:
        self.metrics.turns.labels(outcome).inc()
        fields = {"session_id": session_id, "run_id": run_id, "outcome": outcome}
        log.info("turn ended: %s", outcome, extra={FIELDS: fields})

    @contextmanager
    def model_call(self, session_id: str, model: str) -> Iterator[ModelCall]:
        """Times, counts and traces one model request; an exception (an upstream
        error, with its ``error_type``) is counted, logged and propagates; a
        cancelled one is counted as ``cancelled``."""
        started = time.monotonic()
        outcome = OK
        label = self.metrics.model_label(model)
        with self.tracing.span(
            "model call", **{"gen_ai.request.model": model, "stead.session_id": session_id}
        ) as span:
            try:
                yield ModelCall(label, self.metrics, span)
            except Exception as exc:
                outcome = str(getattr(exc, "error_type", type(exc).__name__))
                fields = {"session_id": session_id, "model": model, "error_type": outcome}
                log.warning("model call failed: %s", exc, extra={FIELDS: fields})
                raise
            except BaseException:  # cancelled: the call never answered
                outcome = CANCELLED
                raise
            finally:
                self.metrics.model_calls.labels(label, outcome).inc()
                self.metrics.model_seconds.labels(label).observe(time.monotonic() - started)

    @contextmanager
    def tool_call(self, session_id: str, kind: str, name: str) -> Iterator[ToolCall]:
        """Times, counts and traces one tool call of ``kind`` (builtin, web,
        memory, mcp, self_hosted); a failed tool is logged by name, never by its input."""
        started = time.monotonic()
        call = ToolCall()
        attributes = {"stead.tool.kind": kind, "stead.tool.name": name}
        fields = {"session_id": session_id, "kind": kind, "tool": name}
        with self.tracing.span("tool call", **attributes) as span:
            try:
                yield call
            except Exception as exc:
                call.outcome = UNAVAILABLE
                log.warning("tool call could not run: %s", exc, extra={FIELDS: fields})
                raise
            except BaseException:  # cancelled (an interrupt): it did not run to its end
                call.outcome = CANCELLED
                raise
            finally:
                self.metrics.tool_calls.labels(kind, call.outcome).inc()
                self.metrics.tool_seconds.labels(kind).observe(time.monotonic() - started)
            if call.outcome == ERROR:
                span.set_status(Status(StatusCode.ERROR, "the tool failed"))
                log.info("tool call failed", extra={FIELDS: fields})
            elif call.outcome == UNAVAILABLE:  # reported by the caller, not raised
                span.set_status(Status(StatusCode.ERROR, "the tool could not run"))
                log.warning("tool call could not run", extra={FIELDS: fields})

    @contextmanager
    def sandbox_acquire(self, session_id: str) -> Iterator[None]:
        started = time.monotonic()
        with self.tracing.span("sandbox acquire", **{"stead.session_id": session_id}):
            yield
        self.metrics.acquire_seconds.observe(time.monotonic() - started)

"""The brain's Prometheus metrics, on a registry each app owns.

Nothing here is module state: tests build several apps in one process, and
each gets its own ``CollectorRegistry``. Labels are bounded sets (route
templates, never paths; tool kinds; model names, up to ``MODEL_LABELS`` of
them), so a client cannot grow a series per request. A model is any name an
agent gives: past the first ``MODEL_LABELS`` a process has seen, the rest are
counted together as ``other``.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from stead.telemetry.host_metrics import HostCollector

CONTENT_TYPE = CONTENT_TYPE_LATEST
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Most requests answer in a millisecond or two; event streams stay open for long."""
CALL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Model and tool calls: from a cached answer to a long build."""
MODEL_LABELS = 100
"""Model names a process labels its series with; more than a deployment uses,
few enough that agents naming made-up models cannot swell every scrape."""
OTHER_MODELS = "other"


class Metrics:
    """Every series the brain keeps; ``render`` is the ``/metrics`` body."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "stead_http_requests",
            "HTTP requests answered, by route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "stead_http_request_duration_seconds",
            "Time from a request's arrival to the end of its answer",
            ["method", "route"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.websockets = Counter(
            "stead_websocket_connections",
            "Terminal WebSocket connections, by route template",
            ["route"],
            registry=r,
        )
        self.turns = Counter(
            "stead_turns", "Turns ended, by outcome (the stop reason)", ["outcome"], registry=r
        )
        self.model_calls = Counter(
            "stead_model_calls",
            "Model requests, by model and outcome (ok, the error type, or cancelled)",
            ["model", "outcome"],
            registry=r,
        )
        self.model_seconds = Histogram(
            "stead_model_call_duration_seconds",
            "One model request, from send to the complete answer",
            ["model"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "stead_model_tokens",
            "Tokens the model reported, by model and kind (input, output, cache ...)",
            ["model", "kind"],
            registry=r,
        )
        self.tool_calls = Counter(
            "stead_tool_calls",
            "Tool calls, by kind (builtin, web, memory, mcp, self_hosted) and outcome "
            "(ok, error: the tool failed, unavailable: it could not be run now, "
            "cancelled: the turn stopped it, an interrupt say)",
            ["kind", "outcome"],
            registry=r,
        )
        self.tool_seconds = Histogram(
            "stead_tool_call_duration_seconds",
            "One tool call as the turn waits for it",
            ["kind"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.acquire_seconds = Histogram(
            "stead_sandbox_acquire_duration_seconds",
            "Getting a session's sandbox for its first call in this process "
            "(made, or woken from its snapshot, by the sandbox host)",
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.sandboxes = Gauge(
            "stead_sandboxes",
            "Sandboxes the sandbox host holds, by state (read at scrape time)",
            ["state"],
            registry=r,
        )
        self.queued_runs = Gauge(
            "stead_queued_runs", "Runs waiting to be claimed (read at scrape time)", registry=r
        )
        self.sandboxes_served = Gauge(
            "stead_sandboxes_served",
            "Sandboxes this process holds a session's state for (read at scrape time)",
            registry=r,
        )
        self._states: set[str] = set()
        """Sandbox states reported so far."""
        self._models: set[str] = set()
        """Model names labelled so far (``model_label``)."""
        self.host = HostCollector()
        """Wake and snapshot durations and egress requests, as the host counts them."""
        r.register(self.host)

    def model_label(self, model: str) -> str:
        """``model`` as the model series label it: itself while fewer than
        ``MODEL_LABELS`` names have been, else ``other``."""
        if model in self._models:
            return model
        if len(self._models) < MODEL_LABELS:
            self._models.add(model)
            return model
        return OTHER_MODELS

    def count_tokens(self, model: str, usage: Mapping[str, int]) -> None:
        for kind, value in usage.items():
            if value:
                self.tokens.labels(model, kind.removesuffix("_tokens")).inc(value)

    def set_sandboxes(self, by_state: Mapping[str, int] | None) -> None:
        """Replaces the sandbox counts: a state that emptied reads 0, not its last
        count; None (the host did not answer) shows no count at all, as for the
        host's own figures, not the counts it had when it last answered."""
        if by_state is None:
            self.sandboxes.clear()
            self._states.clear()
            return
        for state in self._states - set(by_state):
            self.sandboxes.labels(state).set(0)
        for state, count in by_state.items():
            self.sandboxes.labels(state).set(count)
        self._states |= set(by_state)

    def render(self) -> bytes:
        return generate_latest(self.registry)

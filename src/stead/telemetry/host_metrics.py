"""The sandbox host's own counts (``sandbox_host/host_metrics.py``), as read from
its latest ``ping`` answer, rendered as Prometheus series of this process.

They are the host's totals since it started: several brains on one machine
each show the same host figures, so a dashboard sums them per host, not per
brain. A host that did not answer the latest scrape shows none.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

DURATIONS = {
    "wake": "Waking a sandbox (its body started, its workspace restored when it slept)",
    "snapshot": "Snapshotting a sandbox's workspace (at sleep, destroy or on request)",
}


class HostCollector(Collector):
    def __init__(self) -> None:
        self._latest: dict[str, Any] | None = None

    def update(self, found: dict[str, Any] | None) -> None:
        """The ``metrics`` of the host's latest ping answer; None when it did not answer."""
        self._latest = found

    def collect(self) -> Iterator[Metric]:
        found = self._latest
        if not found:
            return
        bounds = [float(b) for b in found.get("buckets", [])]
        for name, doc in DURATIONS.items():
            series = found.get("durations", {}).get(name)
            if series is None:
                continue
            cumulative, buckets = 0, []
            for bound, count in zip([*bounds, float("inf")], series["counts"], strict=True):
                cumulative += int(count)
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            yield HistogramMetricFamily(
                f"stead_sandbox_{name}_duration_seconds",
                doc,
                buckets=buckets,
                sum_value=float(series["sum"]),
            )
        egress = CounterMetricFamily(
            "stead_egress_requests",
            "Requests from sandboxes through their egress proxies, by the proxy's decision",
            labels=["decision"],
        )
        for decision, count in found.get("egress_requests", {}).items():
            egress.add_metric([decision], int(count))
        yield egress

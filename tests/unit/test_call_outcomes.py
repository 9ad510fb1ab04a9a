"""A call the turn cancels (a user's interrupt) is counted as ``cancelled``,
not as one that answered (``ok``)."""

from __future__ import annotations

import anyio

from stead.telemetry import Telemetry
from stead.telemetry.metrics import Metrics


def _outcomes(metrics: Metrics, name: str) -> dict[str, float]:
    return {
        sample.labels["outcome"]: sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    }


async def _cancelled_calls(telemetry: Telemetry) -> None:
    with anyio.CancelScope() as scope:
        with telemetry.tool_call("sesn_1", "builtin", "bash"):
            scope.cancel()
            await anyio.sleep(30)
    with anyio.CancelScope() as scope:
        with telemetry.model_call("sesn_1", "claude-sonnet-4-6"):
            scope.cancel()
            await anyio.sleep(30)


def test_a_cancelled_tool_or_model_call_is_not_counted_as_ok() -> None:
    telemetry = Telemetry(Metrics())
    anyio.run(_cancelled_calls, telemetry)
    assert _outcomes(telemetry.metrics, "stead_tool_calls_total") == {"cancelled": 1}
    assert _outcomes(telemetry.metrics, "stead_model_calls_total") == {"cancelled": 1}

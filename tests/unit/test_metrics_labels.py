"""The model label is bounded: agents name any model they like, and a series
per name would let them swell every scrape of ``/metrics``."""

from __future__ import annotations

from stead.telemetry import Telemetry
from stead.telemetry.metrics import MODEL_LABELS, OTHER_MODELS, Metrics


def _series(metrics: Metrics, name: str) -> dict[str, float]:
    """The samples of ``name`` by their model label."""
    return {
        sample.labels["model"]: sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    }


def test_models_past_the_bound_are_counted_together() -> None:
    telemetry = Telemetry(Metrics())
    names = [f"made-up-model-{n}" for n in range(MODEL_LABELS + 20)]
    for name in [*names, names[0], names[-1]]:
        with telemetry.model_call("sesn_1", name) as call:
            call.answered({"output_tokens": 2})
    calls = _series(telemetry.metrics, "stead_model_calls_total")
    assert len(calls) == MODEL_LABELS + 1
    assert calls[names[0]] == 2  # labelled while there was room, and ever after
    assert calls[OTHER_MODELS] == 21  # the 20 past the bound, one of them twice
    assert names[-1] not in calls
    tokens = _series(telemetry.metrics, "stead_model_tokens_total")
    assert set(tokens) == set(calls)
    assert tokens[OTHER_MODELS] == 42
